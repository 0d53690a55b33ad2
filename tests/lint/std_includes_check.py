#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tests/lint/std_includes_check.py ROOT: every header under include/gradsync that names a
standard-library entity includes the standard header that declares it, itself or through
the gradsync headers it includes.

headers_check.sh compiles each header alone with the standard headers precompiled, which
proves the gradsync includes but not the standard ones; this check covers those, and more
strictly than a compile could: libstdc++'s headers include one another, so a header that
forgot <vector> may still compile with one standard library and not with another. Only the
names in NEEDS are checked (what the tree uses); a name missing from the table is not an
error here.
"""
import pathlib
import re
import sys

CONTAINERS = {"array", "deque", "map", "set", "span", "string", "string_view",
              "unordered_map", "unordered_set", "vector"}
SIZE_T = {"cstddef", "cstdio", "cstdlib", "cstring", "ctime", "cwchar"}
# std::NAME -> the standard headers that declare it (any one will do).
NEEDS = {}
for header, names in {
    "algorithm": "all_of any_of clamp copy copy_backward copy_n count count_if equal fill fill_n "
                 "find find_if find_if_not for_each is_sorted lower_bound max max_element min "
                 "min_element minmax mismatch none_of remove remove_if replace reverse rotate "
                 "search sort stable_sort transform unique upper_bound",
    "array": "array",
    "atomic": "atomic atomic_flag atomic_ref atomic_thread_fence atomic_signal_fence "
              "memory_order memory_order_relaxed memory_order_acquire memory_order_release "
              "memory_order_acq_rel memory_order_seq_cst",
    "bit": "bit_cast bit_ceil bit_floor bit_width countl_zero countr_zero endian has_single_bit "
           "popcount rotl rotr",
    "chrono": "chrono",
    "cmath": "ceil copysign exp fabs floor fma fmax fmin frexp isfinite isinf isnan ldexp "
             "llround log log2 lround nearbyint nextafter pow rint signbit sqrt trunc",
    "concepts": "convertible_to copy_constructible default_initializable derived_from "
                "destructible floating_point integral invocable movable regular same_as "
                "semiregular signed_integral unsigned_integral",
    "condition_variable": "condition_variable condition_variable_any cv_status",
    "cstddef": "byte max_align_t nullptr_t ptrdiff_t to_integer",
    "cstdint": "int8_t int16_t int32_t int64_t intptr_t uint8_t uint16_t uint32_t uint64_t "
               "uintptr_t uint_least64_t uint_fast64_t intmax_t uintmax_t",
    "cstdio": "FILE fclose fflush fgets fopen fprintf fputs fread fseek ftell fwrite perror "
              "printf puts remove rename snprintf sscanf vsnprintf",
    "cstdlib": "_Exit abort atexit atoi atol exit free getenv malloc quick_exit realloc strtod "
               "strtol strtoll strtoul strtoull",
    "cstring": "memchr memcmp memcpy memmove memset strchr strcmp strerror strlen strncmp "
               "strncpy strrchr strstr",
    "deque": "deque",
    "exception": "current_exception exception exception_ptr make_exception_ptr "
                 "rethrow_exception terminate uncaught_exceptions",
    "filesystem": "filesystem",
    "fstream": "fstream ifstream ofstream",
    "functional": "bind_front cref function hash invoke mem_fn not_fn ref reference_wrapper",
    "limits": "numeric_limits",
    "map": "map multimap",
    "memory": "addressof align allocator make_shared make_unique shared_ptr unique_ptr weak_ptr "
              "enable_shared_from_this",
    "mutex": "call_once lock_guard mutex once_flag recursive_mutex scoped_lock timed_mutex "
             "unique_lock try_to_lock adopt_lock defer_lock",
    "new": "align_val_t bad_alloc hardware_destructive_interference_size launder nothrow",
    "numeric": "accumulate exclusive_scan gcd inclusive_scan iota lcm partial_sum reduce",
    "optional": "make_optional nullopt optional",
    "random": "mt19937 mt19937_64 normal_distribution random_device uniform_int_distribution "
              "uniform_real_distribution",
    "set": "multiset set",
    "span": "dynamic_extent span",
    "sstream": "istringstream ostringstream stringstream",
    "stdexcept": "domain_error invalid_argument length_error logic_error out_of_range "
                 "overflow_error range_error runtime_error underflow_error",
    "string": "basic_string getline stod stoi stol stoll stoul stoull string to_string",
    "string_view": "basic_string_view string_view",
    "system_error": "errc error_code error_category generic_category make_error_code "
                    "system_category system_error",
    "thread": "jthread this_thread thread",
    "tuple": "apply forward_as_tuple get make_tuple tie tuple tuple_element tuple_size",
    "type_traits": "add_const_t add_pointer_t bool_constant common_type common_type_t "
                   "conditional conditional_t decay decay_t enable_if enable_if_t false_type "
                   "integral_constant invoke_result invoke_result_t is_arithmetic_v "
                   "is_base_of_v is_const_v is_constant_evaluated is_convertible_v "
                   "is_default_constructible_v is_empty_v is_enum_v is_floating_point_v "
                   "is_function_v is_integral_v is_invocable_v is_lvalue_reference_v "
                   "is_nothrow_move_constructible_v is_pointer_v is_reference_v is_same "
                   "is_same_v is_signed_v is_standard_layout_v is_trivially_copyable "
                   "is_trivially_copyable_v is_unsigned_v is_void_v make_signed_t "
                   "make_unsigned_t remove_const_t remove_cv_t remove_cvref_t "
                   "remove_pointer_t remove_reference_t true_type type_identity "
                   "type_identity_t underlying_type_t void_t",
    "unordered_map": "unordered_map",
    "unordered_set": "unordered_set",
    "utility": "as_const cmp_less declval exchange forward in_place in_place_type "
               "index_sequence integer_sequence make_index_sequence make_pair move pair swap "
               "to_underlying unreachable",
    "variant": "get_if holds_alternative monostate variant visit",
    "vector": "vector",
}.items():
    for name in names.split():
        NEEDS.setdefault(name, set()).add(header)
# Names the standard declares in more than one header.
NEEDS["size_t"] = SIZE_T
NEEDS["abs"] = {"cstdlib", "cmath"}
NEEDS["get"] |= {"array", "utility", "variant"}  # tuple, pair, array and variant elements
NEEDS["swap"] |= {"algorithm"} | CONTAINERS
NEEDS["move"] |= {"algorithm"}  # the range move
for name in ("begin", "end", "size", "data", "ssize", "empty", "distance", "next", "prev",
             "advance", "back_inserter", "iterator_traits", "reverse_iterator"):
    NEEDS[name] = {"iterator"} | (CONTAINERS if name in ("begin", "end", "size", "data",
                                                         "ssize", "empty") else set())
NEEDS["initializer_list"] = {"initializer_list"} | CONTAINERS

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
USE = re.compile(r"\bstd::(\w+)")


def strip(text):
    """The code without comments, string and character literals."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', text)


def main():
    root = pathlib.Path(sys.argv[1]) / "include"
    files = sorted(p for p in root.rglob("*") if p.suffix in (".hpp", ".ipp", ".cuh"))
    direct, local, uses = {}, {}, {}
    for p in files:
        rel = p.relative_to(root).as_posix()
        text = p.read_text()
        direct[rel], local[rel] = set(), set()
        for kind, name in INCLUDE.findall(text):
            if name.startswith("gradsync/"):
                local[rel].add(name)
            elif kind == '"':  # "x.ipp" beside the header
                local[rel].add((p.parent / name).relative_to(root).as_posix())
            else:
                direct[rel].add(name)
        code = strip(text)
        # A name in a macro's body (`#define F(x) std::...`) counts where it is defined.
        uses[rel] = {}
        for m in USE.finditer(code):  # each name's first use, for the message
            if m.group(1) in NEEDS and m.group(1) not in uses[rel]:
                uses[rel][m.group(1)] = code.count("\n", 0, m.start()) + 1
    closure = {}

    def available(rel):
        if rel not in closure:
            seen, todo, have = set(), [rel], set()
            while todo:
                h = todo.pop()
                if h in seen or h not in direct:
                    continue
                seen.add(h)
                have |= direct[h]
                todo.extend(local[h])
            closure[rel] = have
        return closure[rel]

    bad = 0
    for rel in sorted(uses):
        have = available(rel)
        for name, line in sorted(uses[rel].items(), key=lambda kv: kv[1]):
            if not NEEDS[name] & have:
                want = " or ".join(f"<{h}>" for h in sorted(NEEDS[name]))
                print(f"include/{rel}:{line}: std::{name} needs {want}")
                bad += 1
    print(f"{len(files)} headers checked: {bad} standard names without their header")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
