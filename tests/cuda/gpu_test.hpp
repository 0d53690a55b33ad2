// SPDX-License-Identifier: Apache-2.0
// A tiny harness for the CUDA tests that need a GPU: they must also build and run where
// doctest is absent (bench/gpu_check.sh builds them with nvcc alone on the GPU machine).
// GPU_REQUIRE_DEVICE() exits 77 (meson: skipped) with the reason when no GPU is usable.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gradsync/core/cuda_check.hpp>

namespace gpu_test {
inline int& failures() {
  static int n = 0;  // one test program, one counter
  return n;
}
inline int finish(const char* name) {
  std::printf("%s: %s (%d failed checks)\n", name, failures() ? "FAILED" : "passed", failures());
  return failures() ? 1 : 0;
}

// Device buffer helpers: a copy of h in fresh device memory (at least one element, so
// that an empty vector still gets a valid pointer), and n elements copied back. A plain
// cudaMemcpy, as a user would write it: the transports' streams must order it (docs/cuda.md,
// "Ordering with your work").
template <class T>
T* to_device(const std::vector<T>& h) {
  T* d = nullptr;
  GRADSYNC_CUDA_CHECK(cudaMalloc(&d, std::max<std::size_t>(1, h.size()) * sizeof(T)));
  GRADSYNC_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <class T>
std::vector<T> to_host(const T* d, std::size_t n) {
  std::vector<T> h(n);
  GRADSYNC_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
}  // namespace gpu_test

#define GPU_CHECK(cond, ...)                                              \
  do {                                                                    \
    if (!(cond)) {                                                        \
      ++gpu_test::failures();                                             \
      std::printf("CHECK failed %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                           \
      std::printf("\n");                                                  \
    }                                                                     \
  } while (0)

#define GPU_REQUIRE_DEVICE(name)                                                          \
  do {                                                                                    \
    const std::string why_ = gradsync::cuda::unusable_reason();                           \
    if (!why_.empty()) {                                                                  \
      std::printf("%s: SKIPPED (exit 77): no usable CUDA GPU: %s\n", name, why_.c_str()); \
      return 77;                                                                          \
    }                                                                                     \
  } while (0)
