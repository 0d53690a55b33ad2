// SPDX-License-Identifier: Apache-2.0
// CUDA runtime errors as gradsync errors, the "is there a usable GPU" probe that CUDA
// tests use to exit 77 (skipped) instead of failing on a machine without one, and the
// stream a device transport creates for itself.
// Host code: needs only <cuda_runtime_api.h> and libcudart, not nvcc.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "gradsync/core/error.hpp"

namespace gradsync::cuda {

/// Throws errc::transport naming the call, CUDA's message and the source location.
inline void check(cudaError_t e, const char* what, const char* file, int line,
                  const error_site& site = {}) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
  throw error(errc::transport, site,
              std::string(what) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) +
                  " (" + file + ":" + std::to_string(line) + ")");
}

/// Why no CUDA device can be used here ("" when one can): the text CUDA tests print
/// before exiting 77.
inline std::string unusable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  }
  if (n == 0) return "no CUDA device present";
  return {};
}

/// Multiprocessors of the current device (sizes persistent grids).
inline int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 132;  // an H200's count: a sane grid even if the query fails
  }
  return sms;
}

/// The stream a device transport creates for itself: a blocking one, so that work the
/// caller left on the legacy default stream runs before the collective and later
/// default-stream work after it. A plain cudaMemcpy from pageable memory can return before
/// its data lands; a non-blocking stream read stale inputs on an H200 (docs/cuda.md).
inline cudaStream_t create_transport_stream(const char* file, int line) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamDefault), "cudaStreamCreateWithFlags", file, line);
  return s;
}

}  // namespace gradsync::cuda

/// Checks a CUDA runtime call: GRADSYNC_CUDA_CHECK(cudaMalloc(&p, n));
#define GRADSYNC_CUDA_CHECK(call) ::gradsync::cuda::check((call), #call, __FILE__, __LINE__)
