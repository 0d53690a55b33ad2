// SPDX-License-Identifier: Apache-2.0
// transport::nccl on a GPU: algo::native (ncclAllReduce) and algo::nccl_ring give exact
// results; with two or more GPUs (or NCCL accepting two ranks on one GPU) the ring and
// native run on 2 ranks, bitwise identical across ranks, and a rank that never joins a
// collective makes synchronize() time out and abort. broadcast, allgather and
// reduce_scatter on device memory (ncclBroadcast, ncclAllGather, ncclReduceScatter) are
// exact on 1 and 2 ranks; split() (ncclCommSplit) with reversed keys renumbers the ranks
// (on one GPU: a one-rank split).
// Exits 77 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/allgather.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/algo/native.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/nccl.hpp>
#include <gradsync/transport/nccl/group.hpp>
#include <gradsync/algo/nccl_ring.hpp>

#include "gpu_test.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;

namespace {

template <class A, class T, class Op>
std::vector<T> run_case(gs::transport::nccl& t, std::size_t count, Op op) {
  std::vector<T> h(count);
  gs::testing::fill_inputs(std::span<T>(h), Op::id, t.rank(), t.size());
  T* d = nullptr;
  GRADSYNC_CUDA_CHECK(cudaSetDevice(t.device()));
  GRADSYNC_CUDA_CHECK(cudaMalloc(&d, count * sizeof(T)));
  GRADSYNC_CUDA_CHECK(cudaMemcpy(d, h.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  gs::allreduce<A>(t, gs::device_span<T>(d, count), op);
  t.synchronize(gs::deadline::after(gs::seconds_d{60}));
  GRADSYNC_CUDA_CHECK(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
  cudaFree(d);
  return h;
}

template <class A, class T, class Op>
void check_exact(gs::transport::nccl& t, std::size_t count, Op op, const char* what) {
  const auto h = run_case<A, T>(t, count, op);
  GPU_CHECK(gs::testing::count_wrong(std::span<const T>(h), Op::id, t.size()) == 0,
            "%s on %zu rank(s), rank %zu", what, t.size(), t.rank());
}

using gpu_test::to_device;
using gpu_test::to_host;

// broadcast from every root, reduce_scatter of m elements per rank, then allgather of the
// results: exact (fill_inputs' sums) on every rank.
void other_collectives(gs::transport::nccl& t, std::size_t m) {
  const std::size_t n = t.size(), r = t.rank();
  GRADSYNC_CUDA_CHECK(cudaSetDevice(t.device()));
  for (std::size_t root = 0; root < n; ++root) {
    std::vector<std::int32_t> h(m);
    for (std::size_t i = 0; i < m; ++i) h[i] = r == root ? static_cast<std::int32_t>(i + root) : -1;
    std::int32_t* d = to_device(h);
    gs::broadcast(t, gs::device_span<std::int32_t>(d, m), root);
    t.synchronize(gs::deadline::after(gs::seconds_d{60}));
    h = to_host(d, m);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < m; ++i) wrong += h[i] != static_cast<std::int32_t>(i + root);
    GPU_CHECK(wrong == 0, "broadcast from %zu: %zu wrong on rank %zu", root, wrong, r);
    cudaFree(d);
  }
  std::vector<float> in(n * m);
  gs::testing::fill_inputs(std::span<float>(in), gs::reduce_op::sum, r, n);
  float* din = to_device(in);
  float* dout = to_device(std::vector<float>(m));
  float* dall = to_device(std::vector<float>(n * m));
  gs::reduce_scatter(t, gs::device_span<const float>(din, n * m), gs::device_span<float>(dout, m),
                     gs::op::sum);
  gs::allgather(t, gs::device_span<const float>(dout, m), gs::device_span<float>(dall, n * m));
  t.synchronize(gs::deadline::after(gs::seconds_d{60}));
  const auto out = to_host(dout, m);
  const auto all = to_host(dall, n * m);
  GPU_CHECK(
      gs::testing::count_wrong(std::span<const float>(out), gs::reduce_op::sum, n, r * m) == 0,
      "reduce_scatter on rank %zu", r);
  GPU_CHECK(gs::testing::count_wrong(std::span<const float>(all), gs::reduce_op::sum, n) == 0,
            "allgather on rank %zu", r);
  cudaFree(din);
  cudaFree(dout);
  cudaFree(dall);
}

void one_rank() {
  const int dev = 0;
  auto comms = gs::transport::nccl_comms_for_devices(std::span<const int>(&dev, 1));
  gs::transport::nccl t{comms[0], dev};
  check_exact<gs::algo::native, float>(t, 1 << 20, gs::op::sum, "native float sum");
  check_exact<gs::algo::native, gs::bfloat16>(t, 1 << 20, gs::op::avg, "native bf16 avg");
  check_exact<gs::algo::native, std::int64_t>(t, 1000, gs::op::max, "native int64 max");
  check_exact<gs::algo::nccl_ring, float>(t, 12345, gs::op::avg, "nccl_ring float avg");
  other_collectives(t, 100003);
  {  // ncclCommSplit on one GPU: NCCL refuses two ranks on one device, so one rank
    gs::transport::nccl sub = t.split(3, 7, gs::deadline::after(gs::seconds_d{60}));
    GPU_CHECK(sub.size() == 1 && sub.rank() == 0, "one-rank split: rank %zu of %zu", sub.rank(),
              sub.size());
    check_exact<gs::algo::native, float>(sub, 4099, gs::op::sum, "native on the one-rank split");
    other_collectives(sub, 1001);
  }
}

// Two ranks as threads of this process; returns false if NCCL refused the setup.
bool two_ranks(const std::vector<int>& devs) {
  std::vector<ncclComm_t> comms;
  try {
    comms = gs::transport::nccl_comms_for_devices(devs, gs::deadline::after(gs::seconds_d{20}));
  } catch (const gs::error& e) {
    std::printf("2-rank NCCL setup on devices {%d,%d} refused (%s): %s\n", devs[0], devs[1],
                std::string(gs::errc_name(e.code())).c_str(), e.what());
    GPU_CHECK(e.code() == gs::errc::transport || e.code() == gs::errc::timeout, "wrong error code");
    return false;
  }
  std::vector<std::uint64_t> hash(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      try {
        gs::transport::nccl t{comms[static_cast<std::size_t>(r)],
                              devs[static_cast<std::size_t>(r)]};
        check_exact<gs::algo::nccl_ring, float>(t, (1 << 22) + 7, gs::op::sum, "ring float sum");
        check_exact<gs::algo::nccl_ring, gs::half>(t, 100003, gs::op::avg, "ring half avg");
        check_exact<gs::algo::native, double>(t, 4097, gs::op::prod, "native double prod");
        const auto h = run_case<gs::algo::nccl_ring, float>(t, 999999, gs::op::min);
        hash[static_cast<std::size_t>(r)] = gs::testing::fnv1a64(h.data(), h.size() * 4);
        other_collectives(t, (1 << 20) + 3);
        {  // split with reversed keys: rank 0 becomes rank 1 of the new communicator
          gs::transport::nccl sub = t.split(0, -r, gs::deadline::after(gs::seconds_d{60}));
          GPU_CHECK(sub.size() == 2 && sub.rank() == static_cast<std::size_t>(1 - r),
                    "split: rank %d became %zu of %zu", r, sub.rank(), sub.size());
          check_exact<gs::algo::native, float>(sub, 4099, gs::op::sum, "native on the split");
        }
        // Deadline path: rank 1 skips a collective, rank 0 must time out and abort.
        if (r == 0) {
          float* d = nullptr;
          GRADSYNC_CUDA_CHECK(cudaMalloc(&d, 1 << 20));
          bool timed_out = false;
          try {
            gs::allreduce<gs::algo::native>(t, gs::device_span<float>(d, 1 << 18), gs::op::sum);
            t.synchronize(gs::deadline::after(gs::seconds_d{3}));
          } catch (const gs::error& e) {
            timed_out = e.code() == gs::errc::timeout &&
                        std::string(e.what()).find("ncclCommAbort") != std::string::npos;
            std::printf("expected timeout: %s\n", e.what());
          }
          GPU_CHECK(timed_out, "a missing peer must end in errc::timeout + abort");
        }
      } catch (const std::exception& e) {
        ++gpu_test::failures();
        std::printf("rank %d: exception: %s\n", r, e.what());
      }
    });
  }
  for (auto& x : th) x.join();
  GPU_CHECK(hash[0] == hash[1], "ranks differ bitwise");
  return true;
}

}  // namespace

int main() {
  GPU_REQUIRE_DEVICE("test_nccl");
  gradsync::testbed::watchdog wd(240, "test_nccl");
  try {
    one_rank();
    int n = 0;
    GRADSYNC_CUDA_CHECK(cudaGetDeviceCount(&n));
    const bool ran = two_ranks(n >= 2 ? std::vector<int>{0, 1} : std::vector<int>{0, 0});
    std::printf("two-rank part: %s\n", ran ? "ran" : "not possible on this machine");
  } catch (const std::exception& e) {
    std::printf("exception: %s\n", e.what());
    return 1;
  }
  return gpu_test::finish("test_nccl");
}
