// SPDX-License-Identifier: Apache-2.0
// transport::mpi_device on a GPU, 2 MPI ranks: the staged path (pinned host buffer,
// worker thread, stream-ordered) and, when the MPI is CUDA-aware, the direct path give
// exact results, bitwise identical on both ranks, for allreduce, broadcast (every root),
// allgather and reduce_scatter (sum and avg). Every rank exits 77 without a GPU.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <span>
#include <vector>

#include <gradsync/algo/native.hpp>
#include <gradsync/allgather.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/mpi_device.hpp>

#include "gpu_test.hpp"

namespace gs = gradsync;

namespace {
template <class T, class Op>
void run(gs::transport::mpi_device& t, std::size_t count, Op op, const char* what) {
  std::vector<T> h(count);
  gs::testing::fill_inputs(std::span<T>(h), Op::id, t.rank(), t.size());
  T* d = nullptr;
  GRADSYNC_CUDA_CHECK(cudaMalloc(&d, count * sizeof(T)));
  GRADSYNC_CUDA_CHECK(cudaMemcpy(d, h.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  gs::allreduce<gs::algo::native>(t, gs::device_span<T>(d, count), op);
  gs::allreduce<gs::algo::native>(t, gs::device_span<T>(d, count / 2),
                                  gs::op::max);  // queued behind
  t.synchronize(gs::deadline::after(gs::seconds_d{60}));
  GRADSYNC_CUDA_CHECK(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
  cudaFree(d);
  // max of identical values leaves them unchanged: the whole buffer must be exact.
  GPU_CHECK(gs::testing::count_wrong(std::span<const T>(h), Op::id, t.size()) == 0,
            "%s rank %zu (%s)", what, t.rank(), t.cuda_aware() ? "CUDA-aware" : "staged");
  std::uint64_t mine = gs::testing::fnv1a64(h.data(), count * sizeof(T)), other = 0;
  MPI_Allreduce(&mine, &other, 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
  GPU_CHECK(other == 0, "%s: ranks differ bitwise", what);
}
template <class T>
T value(std::size_t who, std::size_t i) {
  return gs::testing::from_double<T>(static_cast<double>((i * 7 + who * 13) % 201) - 100);
}
std::size_t wrong_bits(const void* a, const void* b, std::size_t bytes) {
  return std::memcmp(a, b, bytes) != 0;
}

// broadcast from every root, allgather, and reduce_scatter (sum, avg) with exact inputs.
template <class T>
void collectives(gs::transport::mpi_device& t, std::size_t count, const char* what) {
  const std::size_t n = t.size(), r = t.rank();
  const auto until = [] { return gs::deadline::after(gs::seconds_d{60}); };
  const char* path = t.cuda_aware() ? "CUDA-aware" : "staged";
  for (std::size_t root = 0; root < n; ++root) {
    std::vector<T> h(count), want(count);
    for (std::size_t i = 0; i < count; ++i) {
      h[i] = value<T>(r == root ? root : n + 1, i);
      want[i] = value<T>(root, i);
    }
    T* d = gpu_test::to_device(h);
    gs::broadcast(t, gs::device_span<T>(d, count), root);
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
    gs::allgather(t, gs::device_span<const T>(din, count), gs::device_span<T>(dout, n * count));
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
    gs::testing::fill_inputs(std::span<T>(in), decltype(op)::id, r, n);
    T* din = gpu_test::to_device(in);
    T* dout = gpu_test::to_device(std::vector<T>(count));
    gs::reduce_scatter(t, gs::device_span<const T>(din, n * count), gs::device_span<T>(dout, count),
                       op);
    t.synchronize(until());
    const std::vector<T> got = gpu_test::to_host(dout, count);
    cudaFree(din);
    cudaFree(dout);
    GPU_CHECK(
        gs::testing::count_wrong(std::span<const T>(got), decltype(op)::id, n, r * count) == 0,
        "%s reduce_scatter %s, rank %zu (%s)", what,
        std::string(gs::op_name(decltype(op)::id)).c_str(), r, path);
  };
  scatter(gs::op::sum);
  scatter(gs::op::avg);
}
}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string why = gs::cuda::unusable_reason();
  if (!why.empty()) {
    if (rank == 0)
      std::printf("test_mpi_device: SKIPPED (exit 77): no usable CUDA GPU: %s\n", why.c_str());
    MPI_Finalize();
    return 77;
  }
  int ngpu = 1;
  cudaGetDeviceCount(&ngpu);
  try {
    gs::transport::mpi host{MPI_COMM_WORLD};
    for (bool aware : {false, true}) {
      if (aware && !gs::transport::mpi_is_cuda_aware()) continue;
      gs::transport::mpi_device t{host, rank % ngpu, aware};
      run<float>(t, (1 << 20) + 3, gs::op::sum, "float sum");
      run<gs::bfloat16>(t, 100001, gs::op::avg, "bf16 avg");
      collectives<float>(t, (1 << 20) + 3, "float");
      collectives<gs::bfloat16>(t, 1001, "bf16");
    }
  } catch (const std::exception& e) {
    std::printf("rank %d: exception: %s\n", rank, e.what());
    ++gpu_test::failures();
  }
  const int rc = gpu_test::finish("test_mpi_device");
  MPI_Finalize();
  return rc;
}
