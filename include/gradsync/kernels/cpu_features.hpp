// SPDX-License-Identifier: Apache-2.0
// Which x86 vector extensions this CPU runs, asked once per process, for the host loops
// that pick an AVX2 (and, for half, F16C) build at run time: kernels/host.hpp and
// kernels/host_16bit.hpp. x86-64 with GCC or Clang only, never under nvcc;
// -DGRADSYNC_NO_AVX2_DISPATCH turns the dispatch off (GRADSYNC_HOST_AVX2 = 0).
#pragma once

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__CUDACC__) && !defined(GRADSYNC_NO_AVX2_DISPATCH)
#define GRADSYNC_HOST_AVX2 1
#include <cpuid.h>
#else
#define GRADSYNC_HOST_AVX2 0
#endif

// SSE2 is in x86-64's baseline: used without a run-time check (kernels/select.hpp's
// compare-and-movemask); never under nvcc.
#if defined(__SSE2__) && !defined(__CUDACC__)
#define GRADSYNC_HOST_SSE2 1
#include <emmintrin.h>
#else
#define GRADSYNC_HOST_SSE2 0
#endif

#if GRADSYNC_HOST_AVX2
namespace gradsync::kernels::detail {

/// Whether this CPU runs AVX2 (libgcc checks the OS saves the 256-bit registers too).
inline bool has_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}

/// Whether this CPU runs AVX2 and F16C. libgcc's __builtin_cpu_supports does not know
/// "f16c" in GCC 12 (it answers 0), so CPUID leaf 1 (ECX bit 29) is read.
inline bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return has_avx2() && __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
  }();
  return yes;
}

/// Whether this CPU runs AVX-512 F, DQ and VL (64-bit integer <-> double conversions in
/// vectors: compress::exact's decode).
inline bool has_avx512dq() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512dq") != 0 &&
           __builtin_cpu_supports("avx512vl") != 0;
  }();
  return yes;
}

}  // namespace gradsync::kernels::detail
#endif
