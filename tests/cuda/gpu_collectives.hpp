// SPDX-License-Identifier: Apache-2.0
// The device collectives' exact-result checks, for any device transport with
// broadcast, allgather and reduce_scatter (test_mpi_device.cu, test_cuda_ipc.cu):
// broadcast from every root, allgather, reduce_scatter (sum, avg), exact inputs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gradsync/allgather.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "gpu_test.hpp"

namespace gpu_test {
template <class T>
T value(std::size_t who, std::size_t i) {
  return gradsync::testing::from_double<T>(static_cast<double>((i * 7 + who * 13) % 201) - 100);
}
inline std::size_t wrong_bits(const void* a, const void* b, std::size_t bytes) {
  return std::memcmp(a, b, bytes) != 0;
}

// broadcast from every root, allgather, and reduce_scatter (sum, avg) with exact inputs.
template <class T, class Tr>
void collectives(Tr& t, std::size_t count, const char* what, const char* path) {
  const std::size_t n = t.size(), r = t.rank();
  const auto until = [] { return gradsync::deadline::after(gradsync::seconds_d{60}); };
  for (std::size_t root = 0; root < n; ++root) {
    std::vector<T> h(count), want(count);
    for (std::size_t i = 0; i < count; ++i) {
      h[i] = value<T>(r == root ? root : n + 1, i);
      want[i] = value<T>(root, i);
    }
    T* d = gpu_test::to_device(h);
    gradsync::broadcast(t, gradsync::device_span<T>(d, count), root);
    t.synchronize(until());
    const std::vector<T> got = gpu_test::to_host(d, count);
    cudaFree(d);
    GPU_CHECK(!wrong_bits(got.data(), want.data(), count * sizeof(T)),
              "%s broadcast from %zu, rank %zu (%s)", what, root, r, path);
  }
  {
    std::vector<T> mine(count), want(n * count);
    for (std::size_t i = 0; i < count; ++i) mine[i] = value<T>(r, i);
    for (std::size_t q = 0; q < n; ++q) {
      for (std::size_t i = 0; i < count; ++i) want[q * count + i] = value<T>(q, i);
    }
    T* din = gpu_test::to_device(mine);
    T* dout = gpu_test::to_device(std::vector<T>(n * count));
    gradsync::allgather(t, gradsync::device_span<const T>(din, count),
                        gradsync::device_span<T>(dout, n * count));
    t.synchronize(until());
    const std::vector<T> got = gpu_test::to_host(dout, n * count);
    cudaFree(din);
    cudaFree(dout);
    GPU_CHECK(!wrong_bits(got.data(), want.data(), n * count * sizeof(T)),
              "%s allgather, rank %zu (%s)", what, r, path);
  }
  auto scatter = [&](auto op) {
    // Rank r's input: block q holds elements q * count ... of the exact-input series.
    std::vector<T> in(n * count);
    gradsync::testing::fill_inputs(std::span<T>(in), decltype(op)::id, r, n);
    T* din = gpu_test::to_device(in);
    T* dout = gpu_test::to_device(std::vector<T>(count));
    gradsync::reduce_scatter(t, gradsync::device_span<const T>(din, n * count),
                             gradsync::device_span<T>(dout, count), op);
    t.synchronize(until());
    const std::vector<T> got = gpu_test::to_host(dout, count);
    cudaFree(din);
    cudaFree(dout);
    GPU_CHECK(gradsync::testing::count_wrong(std::span<const T>(got), decltype(op)::id, n,
                                             r * count) == 0,
              "%s reduce_scatter %s, rank %zu (%s)", what,
              std::string(gradsync::op_name(decltype(op)::id)).c_str(), r, path);
  };
  scatter(gradsync::op::sum);
  scatter(gradsync::op::avg);
}
}  // namespace gpu_test
