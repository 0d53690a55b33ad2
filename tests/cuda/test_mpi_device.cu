// SPDX-License-Identifier: Apache-2.0
// transport::mpi_device on a GPU, 2 MPI ranks: the staged path (pinned host buffer,
// worker thread, stream-ordered) and, when the MPI is CUDA-aware, the direct path give
// exact results, bitwise identical on both ranks, for allreduce, broadcast (every root),
// allgather and reduce_scatter (sum and avg). Every rank exits 77 without a GPU.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <span>
#include <vector>

#include <gradsync/algo/native.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/mpi_device.hpp>

#include "gpu_collectives.hpp"
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
      const char* path = aware ? "CUDA-aware" : "staged";
      gpu_test::collectives<float>(t, (1 << 20) + 3, "float", path);
      gpu_test::collectives<gs::bfloat16>(t, 1001, "bf16", path);
      if (rank == 0) std::printf("test_mpi_device: %s path checked\n", path);
    }
  } catch (const std::exception& e) {
    std::printf("rank %d: exception: %s\n", rank, e.what());
    ++gpu_test::failures();
  }
  const int rc = gpu_test::finish("test_mpi_device");
  MPI_Finalize();
  return rc;
}
