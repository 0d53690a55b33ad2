// SPDX-License-Identifier: Apache-2.0
// Compile-time configuration shared by every gradsync header.
#pragma once

#define GRADSYNC_VERSION_MAJOR 0
#define GRADSYNC_VERSION_MINOR 2
#define GRADSYNC_VERSION_PATCH 0
#define GRADSYNC_STRINGIFY_(x) #x
#define GRADSYNC_STRINGIFY(x) GRADSYNC_STRINGIFY_(x)
/// "MAJOR.MINOR.PATCH" (programs' --version; meson.build's project version must match).
#define GRADSYNC_VERSION_STRING              \
  GRADSYNC_STRINGIFY(GRADSYNC_VERSION_MAJOR) \
  "." GRADSYNC_STRINGIFY(GRADSYNC_VERSION_MINOR) "." GRADSYNC_STRINGIFY(GRADSYNC_VERSION_PATCH)

// Marks the elementwise functors that run both in host loops and in CUDA kernels.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define GRADSYNC_HOST_DEVICE __host__ __device__
#define GRADSYNC_DEVICE_COMPILE 1
#else
#define GRADSYNC_HOST_DEVICE
#define GRADSYNC_DEVICE_COMPILE 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GRADSYNC_RESTRICT __restrict__
#define GRADSYNC_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define GRADSYNC_RESTRICT
#define GRADSYNC_ALWAYS_INLINE inline
#endif

// Separate compilation (docs/build-time.md, "Separate compilation"). By default gradsync
// is header-only: the large functions that are not templates (those of the headers with
// an .ipp beside them: the allreducer's core, transport::mpi and shm, ...) are `inline`,
// and every translation unit compiles them again. A program that defines
// GRADSYNC_SEPARATE_COMPILATION in every translation unit gets them declared only, and
// compiles them once in one source file that includes <gradsync/src.hpp> (and
// <gradsync/src_mpi.hpp> when it uses MPI). The rest stays inline.
#if defined(GRADSYNC_SEPARATE_COMPILATION)
#define GRADSYNC_HEADER_ONLY 0
#define GRADSYNC_DECL
#else
#define GRADSYNC_HEADER_ONLY 1
#define GRADSYNC_DECL inline
#endif
