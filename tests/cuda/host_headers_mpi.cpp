// SPDX-License-Identifier: Apache-2.0
// The MPI-facing CUDA headers compile with the plain host compiler.
#include <gradsync/allreduce.hpp>
#include <gradsync/algo/native.hpp>
#include <gradsync/transport/cuda_ipc.hpp>
#include <gradsync/transport/mpi_device.hpp>
#include <gradsync/transport/nccl/from_mpi.hpp>

namespace gs = gradsync;

void gradsync_host_staged_allreduce(gs::transport::mpi_device& t, float* gpu, std::size_t n) {
  gs::allreduce<gs::algo::native>(t, gs::device_span<float>(gpu, n), gs::op::sum);
  t.synchronize(gs::deadline::after(gs::seconds_d{10}));
}

// cuda_ipc bootstrapped over the MPI transport (its handles all-gathered by isend/irecv).
void gradsync_host_ipc_over_mpi(gs::transport::mpi& host) {
  gs::transport::ipc_bootstrap_over<gs::transport::mpi> boot{host};
  gs::transport::cuda_ipc ipc{boot, 0};
  ipc.synchronize(gs::deadline::after(gs::seconds_d{10}));
}
