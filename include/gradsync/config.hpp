// SPDX-License-Identifier: Apache-2.0
// Compile-time configuration shared by every gradsync header.
#pragma once

#define GRADSYNC_VERSION_MAJOR 0
#define GRADSYNC_VERSION_MINOR 1
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
