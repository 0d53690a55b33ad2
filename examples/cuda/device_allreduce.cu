// SPDX-License-Identifier: Apache-2.0
// The smallest CUDA program: two processes on one GPU average a bfloat16 "gradient" that
// lives in device memory, with transport::cuda_ipc and algo::native (one-shot/two-shot
// kernels reading the peer's buffer). No MPI needed: fork_group bootstraps the handles.
//   ./device_allreduce        (prints the first values on rank 0; exits 0 without a GPU)
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include <gradsync/allreduce.hpp>
#include <gradsync/algo/native.hpp>
#include <gradsync/transport/cuda_ipc.hpp>
#include <gradsync/transport/cuda_ipc/fork.hpp>

namespace gs = gradsync;

int main() {
  const int rc = gs::transport::fork_group::run_forked(2, [](gs::transport::fork_group& g) {
    if (const auto why = gs::cuda::unusable_reason(); !why.empty()) {
      if (g.rank() == 0) std::printf("no usable GPU (%s): nothing to do\n", why.c_str());
      return 77;
    }
    gs::transport::cuda_ipc ipc{g, /*device=*/0};
    const std::size_t n = 1 << 20;
    std::vector<gs::bfloat16> grad(n, gs::bfloat16(g.rank() == 0 ? 1.0f : 3.0f));
    gs::bfloat16* d = nullptr;
    GRADSYNC_CUDA_CHECK(cudaMalloc(&d, n * sizeof(gs::bfloat16)));
    GRADSYNC_CUDA_CHECK(cudaMemcpy(d, grad.data(), n * 2, cudaMemcpyHostToDevice));
    gs::allreduce<gs::algo::native>(ipc, gs::device_span<gs::bfloat16>(d, n), gs::op::avg);
    ipc.synchronize(gs::deadline::after(gs::seconds_d{30}));  // stream-ordered until here
    GRADSYNC_CUDA_CHECK(cudaMemcpy(grad.data(), d, n * 2, cudaMemcpyDeviceToHost));
    if (g.rank() == 0) {
      std::printf("rank 0: avg of 1 and 3 = %g (all %zu elements)\n", static_cast<float>(grad[0]),
                  n);
    }
    cudaFree(d);
    g.barrier();
    return static_cast<float>(grad[n - 1]) == 2.0f ? 0 : 1;
  });
  return rc == 77 ? 0 : rc;
}
