#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tests/lint/layers_check.py ROOT: the headers under include/gradsync only include their
own layer or a lower one (docs/design.md, "Layers and header map"). A deprecated
forwarding header (its include marked "gradsync: forwarding header") is exempt: it only
points from an old path to the new one."""
import os
import re
import sys

# Lowest first. A folder (or top-level header) missing here is an error: place it.
LAYERS = [
    ('config.hpp',),
    ('core',),
    ('kernels', 'testing'),
    ('transport',),
    ('check',),
    ('algo',),
    ('fusion', 'compress'),
    ('observe',),
    ('detail', 'allreducer', 'allreduce.hpp', 'allgather.hpp', 'broadcast.hpp',
     'reduce_scatter.hpp', 'allreducer_options.hpp', 'process_set.hpp'),
    ('allreducer.hpp',),
    ('gradsync.hpp', 'src.hpp', 'src_mpi.hpp'),
    # Integrations with a framework: only programs that link it include them.
    ('torch',),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
# Deprecated folders: their headers only forward.
FORWARD_ONLY = set()  # none since 0.2.0 (algorithm/ and compression/ were removed)


def layer(rel):
    top = rel.split('/')[1]
    if top in FORWARD_ONLY:
        return None
    if top not in RANK:
        raise SystemExit(f'layers: {rel}: "{top}" has no layer; add it to LAYERS in '
                         f'{sys.argv[0]} and to the map in docs/design.md')
    return RANK[top]


def main():
    inc = os.path.join(sys.argv[1], 'include')
    include = re.compile(r'\s*#\s*include\s*[<"](gradsync/[^>"]+)[>"](.*)')
    bad = checked = 0
    for d, _, files in sorted(os.walk(os.path.join(inc, 'gradsync'))):
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(d, f), inc)
            own = layer(rel)
            with open(os.path.join(d, f), encoding='utf-8') as fh:
                for n, line in enumerate(fh, 1):
                    m = include.match(line)
                    if not m:
                        continue
                    checked += 1
                    if 'gradsync: forwarding header' in m.group(2):
                        continue
                    if own is None:
                        print(f'{rel}:{n}: a deprecated path may only forward')
                        bad += 1
                        continue
                    target = layer(m.group(1))
                    if target is not None and target > own:
                        print(f'{rel}:{n}: includes {m.group(1)} from a higher layer '
                              f'({LAYERS[target][0]} above {LAYERS[own][0]})')
                        bad += 1
    print(f'{bad} upward include(s) among {checked} gradsync includes')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
