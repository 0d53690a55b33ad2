#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tests/lint/separate_check.py ROOT: every .ipp under include/gradsync (the non-template
functions of the header beside it, config.hpp) is included by that header under
`#if GRADSYNC_HEADER_ONLY` and by exactly one of src.hpp and src_mpi.hpp; every function
declared GRADSYNC_DECL in a header has its .ipp. Else a separately compiled program
would miss a definition at link time, or hold two."""
import os
import re
import sys


def main():
    inc = os.path.join(sys.argv[1], 'include')
    read = lambda rel: open(os.path.join(inc, rel), encoding='utf-8').read()
    srcs = {s: re.findall(r'#include "(gradsync/[^"]+\.ipp)"', read(f'gradsync/{s}'))
            for s in ('src.hpp', 'src_mpi.hpp')}
    bad = n = 0
    for d, _, files in sorted(os.walk(os.path.join(inc, 'gradsync'))):
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(d, f), inc)
            if f.endswith('.hpp') and not f.startswith('src') and re.search(
                    r'^\s*(\[\[\w+\]\]\s*)?GRADSYNC_DECL\b', read(rel), re.M):
                if not os.path.exists(os.path.join(inc, rel[:-4] + '.ipp')):
                    print(f'{rel}: declares GRADSYNC_DECL functions but has no {f[:-4]}.ipp')
                    bad += 1
            if not f.endswith('.ipp'):
                continue
            n += 1
            hdr = rel[:-4] + '.hpp'
            guarded = re.search(r'#if GRADSYNC_HEADER_ONLY\s*\n#include "' + re.escape(rel) + '"',
                                read(hdr)) if os.path.exists(os.path.join(inc, hdr)) else None
            if not guarded:
                print(f'{rel}: {hdr} must end with #if GRADSYNC_HEADER_ONLY / #include "{rel}"')
                bad += 1
            where = [s for s, l in srcs.items() if rel in l]
            if len(where) != 1 or srcs[where[0]].count(rel) != 1:
                print(f'{rel}: included {sum(l.count(rel) for l in srcs.values())} times by '
                      'src.hpp and src_mpi.hpp; once is right (src_mpi.hpp when it needs <mpi.h>)')
                bad += 1
    print(f'{n} .ipp files checked, {bad} problem(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
