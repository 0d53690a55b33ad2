// SPDX-License-Identifier: Apache-2.0
// Bootstrap of transport::nccl from an MPI communicator: rank 0 makes the NCCL unique
// id, MPI_Ibcast (polled, under the deadline) sends it to every rank, each rank creates
// its non-blocking NCCL rank.
//   transport::nccl t{transport::nccl_comm_from_mpi(MPI_COMM_WORLD), local_gpu};
// Kept apart from nccl.hpp so that NCCL programs without MPI never need mpi.h.
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "gradsync/core/cuda_check.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/transport/mpi/poll.hpp"
#include "gradsync/transport/nccl.hpp"

namespace gradsync::transport {

/// A non-blocking NCCL communicator spanning `comm`'s ranks (same rank numbers), on
/// device `device` (made current). Collective over `comm`.
inline ncclComm_t nccl_comm_from_mpi(MPI_Comm comm, int device,
                                     deadline until = deadline::after(default_timeout())) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  GRADSYNC_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id{};
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      throw error(errc::transport, {0, error_site::npos, ~0ull},
                  std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r));
    }
  }
  // Polled under `until`: a blocking MPI_Bcast would wait for a missing rank forever.
  auto slot = std::make_unique<ncclUniqueId>(id);
  MPI_Request req = MPI_REQUEST_NULL;
  int e = MPI_Ibcast(slot.get(), sizeof id, MPI_BYTE, 0, comm, &req);
  if (e == MPI_SUCCESS) {
    e = detail::poll_collective(
        req, until, [&] { (void)slot.release(); }, {static_cast<std::size_t>(rank), 0, ~0ull},
        "the broadcast of the NCCL unique id (every rank calls nccl_comm_from_mpi)");
  }
  if (e != MPI_SUCCESS) {
    throw error(errc::transport, {static_cast<std::size_t>(rank), 0, ~0ull},
                "MPI_Ibcast of the NCCL unique id failed (MPI error " + std::to_string(e) + ")");
  }
  id = *slot;
  return nccl_init_rank(id, size, rank, until);
}

}  // namespace gradsync::transport
