// SPDX-License-Identifier: Apache-2.0
// Every host-side CUDA header compiles with the plain host compiler (no nvcc), and the
// nccl native path instantiates from host code: this file only has to build.
#include <gradsync/allreduce.hpp>
#include <gradsync/algo/native.hpp>
#include <gradsync/algo/ring.hpp>
#include <gradsync/algo/runs_on.hpp>
#include <gradsync/core/cuda_check.hpp>
#include <gradsync/core/device_memory.hpp>
#include <gradsync/kernels/device_body.hpp>
#include <gradsync/kernels/device_executor.hpp>
#include <gradsync/kernels/device_pack.hpp>
#include <gradsync/transport/cuda_ipc.hpp>
#include <gradsync/transport/cuda_ipc/fork.hpp>
#include <gradsync/transport/nccl.hpp>
#include <gradsync/transport/nccl/group.hpp>
#include <gradsync/algo/nccl_ring.hpp>

namespace gs = gradsync;

// runs_on_v on device transports: native and run_device algorithms only.
static_assert(gs::runs_on_v<gs::algo::native, gs::transport::nccl>);
static_assert(gs::runs_on_v<gs::algo::nccl_ring, gs::transport::nccl>);
static_assert(!gs::runs_on_v<gs::algo::ring, gs::transport::nccl>);  // host-memory algorithm
static_assert(!gs::runs_on_v<gs::algo::hierarchical<>, gs::transport::nccl>);
static_assert(gs::runs_on_v<gs::algo::native, gs::transport::cuda_ipc>);
static_assert(!gs::runs_on_v<gs::algo::nccl_ring, gs::transport::cuda_ipc>);
static_assert(!gs::runs_on_v<gs::algo::ring, gs::transport::cuda_ipc>);

void gradsync_host_native_allreduce(gs::transport::nccl& t, gs::bfloat16* gpu, std::size_t n) {
  gs::allreduce<gs::algo::native>(t, gs::device_span<gs::bfloat16>(gpu, n), gs::op::avg);
  t.synchronize(gs::deadline::after(gs::seconds_d{10}));
}

// cuda_ipc's setup from host code, over the fork-based bootstrap.
void gradsync_host_ipc_setup(gs::transport::fork_group& g) {
  gs::transport::cuda_ipc ipc{g, 0};
  ipc.synchronize(gs::deadline::after(gs::seconds_d{10}));
}
