// SPDX-License-Identifier: Apache-2.0
// Bootstrap of transport::nccl for several GPUs driven by ONE process (one thread per
// GPU, like transport::local): one non-blocking communicator per device, created
// together in one NCCL group. Rank i uses devices[i]:
//   auto comms = transport::nccl_comms_for_devices({0, 1});
//   // in thread i:  transport::nccl t{comms[i], devices[i]};
// With a single device this is the one-rank communicator bench/gpu_check.sh uses.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gradsync/core/cuda_check.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/transport/nccl.hpp"

namespace gradsync::transport {

inline std::vector<ncclComm_t> nccl_comms_for_devices(
    std::span<const int> devices, deadline until = deadline::after(default_timeout())) {
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  ncclUniqueId id{};
  auto fail = [&](const std::string& why, errc code) {
    for (ncclComm_t c : comms) {
      if (c) ncclCommAbort(c);
    }
    throw error(code, {}, why);
  };
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    fail(std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r), errc::transport);
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclGroupStart();
  for (int i = 0; i < n; ++i) {
    GRADSYNC_CUDA_CHECK(cudaSetDevice(devices[static_cast<std::size_t>(i)]));
    const ncclResult_t r =
        ncclCommInitRankConfig(&comms[static_cast<std::size_t>(i)], n, id, i, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
      ncclGroupEnd();
      fail(std::string("ncclCommInitRankConfig failed: ") + ncclGetErrorString(r) + ": " +
               ncclGetLastError(nullptr),
           errc::transport);
    }
  }
  const ncclResult_t g = ncclGroupEnd();
  if (g != ncclSuccess && g != ncclInProgress) {
    fail(std::string("ncclGroupEnd (communicator creation) failed: ") + ncclGetErrorString(g),
         errc::transport);
  }
  for (ncclComm_t c : comms) {
    for (;;) {
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(c, &st) != ncclSuccess) st = ncclInternalError;
      if (st == ncclSuccess) break;
      if (st != ncclInProgress) {
        fail(std::string("NCCL communicator creation failed: ") + ncclGetErrorString(st) + ": " +
                 ncclGetLastError(c),
             errc::transport);
      }
      if (until.expired()) fail("NCCL communicator creation timed out", errc::timeout);
      std::this_thread::yield();
    }
  }
  return comms;
}

}  // namespace gradsync::transport
