// SPDX-License-Identifier: Apache-2.0
// transport::cuda_ipc with 2 and 4 processes (fork_group) sharing GPU 0: one-shot and
// two-shot (chunked through a small staging buffer) give exact results, bitwise
// identical on every rank, and so do broadcast (every root), allgather and reduce_scatter
// (sum, avg) in several chunks; a rank that skips a call makes its peer time out inside
// the kernel barrier and synchronize() throw errc::timeout; ranks given different staging
// sizes refuse with errc::mismatch on both. Exits 77 without a GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/cuda_ipc.hpp>
#include <gradsync/transport/cuda_ipc/fork.hpp>

#include "gpu_collectives.hpp"
#include "gpu_test.hpp"

namespace gs = gradsync;
using gs::transport::cuda_ipc;
using gs::transport::fork_group;

namespace {

template <class T, class Op>
int one_case(cuda_ipc& t, fork_group& g, std::size_t count, Op op, bool two) {
  std::vector<T> h(count);
  gs::testing::fill_inputs(std::span<T>(h), Op::id, t.rank(), t.size());
  T* d = nullptr;
  GRADSYNC_CUDA_CHECK(cudaMalloc(&d, count * sizeof(T)));
  GRADSYNC_CUDA_CHECK(cudaMemcpy(d, h.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  const gs::call_context ctx{gs::deadline::after(gs::seconds_d{60}), t.next_seq(), 0};
  if (two)
    t.two_shot(d, count, op, ctx);
  else
    t.one_shot(d, count, op, ctx);
  t.synchronize(ctx.until);
  GRADSYNC_CUDA_CHECK(cudaMemcpy(h.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
  cudaFree(d);
  int bad = 0;
  const std::size_t wrong = gs::testing::count_wrong(std::span<const T>(h), Op::id, t.size());
  if (wrong) {
    std::printf("rank %zu: %s %s count %zu: %zu wrong\n", t.rank(), two ? "two-shot" : "one-shot",
                std::string(gs::dtype_name(gs::dtype_of<T>::value)).c_str(), count, wrong);
    ++bad;
  }
  std::vector<std::uint64_t> hashes(g.size());
  const std::uint64_t mine = gs::testing::fnv1a64(h.data(), count * sizeof(T));
  g.allgather(&mine, hashes.data(), sizeof mine);
  for (auto x : hashes) bad += x != hashes[0];
  return bad;
}

int group_body(fork_group& g) {
  const std::string why = gs::cuda::unusable_reason();
  if (!why.empty()) return 77;
  cuda_ipc t{g, 0, 1 << 20};  // 1 MiB halves: large inputs go in several chunks
  int bad = 0;
  bad += one_case<float>(t, g, 1000, gs::op::sum, false);
  bad += one_case<gs::bfloat16>(t, g, 4099, gs::op::avg, false);
  bad += one_case<float>(t, g, (1 << 20) + 5, gs::op::sum, true);
  bad += one_case<gs::half>(t, g, 300001, gs::op::avg, true);
  bad += one_case<std::int32_t>(t, g, 77777, gs::op::max, true);
  bad += one_case<double>(t, g, 5, gs::op::prod, true);  // fewer elements than ranks' slices
  gpu_test::collectives<float>(t, (1 << 20) + 3, "float", "cuda_ipc");  // 4 MiB: 4+ chunks
  gpu_test::collectives<gs::bfloat16>(t, 1001, "bf16", "cuda_ipc");
  g.barrier();
  return bad + gpu_test::failures() ? 1 : 0;
}

int timeout_body(fork_group& g) {
  cuda_ipc t{g, 0, 1 << 20};
  int rc = 0;
  if (g.rank() == 0) {  // rank 1 never calls: rank 0 must time out, not hang
    float* d = nullptr;
    GRADSYNC_CUDA_CHECK(cudaMalloc(&d, 4096));
    const gs::call_context ctx{gs::deadline::after(gs::seconds_d{2}), t.next_seq(), 0};
    bool ok = false;
    try {
      t.two_shot(d, 1024, gs::op::sum, ctx);
      t.synchronize(gs::deadline::after(gs::seconds_d{20}));
    } catch (const gs::error& e) {
      ok = e.code() == gs::errc::timeout;
      std::printf("expected timeout: %s\n", e.what());
    }
    rc = ok ? 0 : 1;
  }
  g.barrier();
  return rc;
}

// Rank 1 sizes its staging halves at 2 MiB, rank 0 at 1 MiB: both refuse at
// construction with the same mismatch, before either addresses the other's region.
int staging_body(fork_group& g) {
  int rc = 1;
  try {
    cuda_ipc t{g, 0, g.rank() == 1 ? std::size_t{2} << 20 : std::size_t{1} << 20};
    std::printf("rank %zu: different staging sizes were accepted\n", g.rank());
  } catch (const gs::error& e) {
    const std::string what = e.what();
    rc = e.code() == gs::errc::mismatch &&
                 what.find("rank 1 has staging halves of 2097152 bytes and rank 0 of 1048576") !=
                     std::string::npos
             ? 0
             : 1;
    std::printf("rank %zu: expected mismatch: %s\n", g.rank(), e.what());
  }
  g.barrier();
  return rc;
}

// Probe the GPU in a child so that this process stays CUDA-free until it forks.
bool gpu_usable() {
  return fork_group::run_forked(1, [](fork_group&) {
           const std::string why = gs::cuda::unusable_reason();
           if (!why.empty())
             std::printf("test_cuda_ipc: SKIPPED (exit 77): no usable CUDA GPU: %s\n", why.c_str());
           return why.empty() ? 0 : 77;
         }) == 0;
}

}  // namespace

int main() {
  if (!gpu_usable()) return 77;
  int rc = 0;
  for (std::size_t n : {2u, 4u}) {
    const int r = fork_group::run_forked(n, group_body);
    std::printf("cuda_ipc %zu processes: %s\n", n, r == 0 ? "passed" : "FAILED");
    rc |= r;
  }
  const int r = fork_group::run_forked(2, timeout_body);
  std::printf("cuda_ipc missing peer -> timeout: %s\n", r == 0 ? "passed" : "FAILED");
  rc |= r;
  const int s = fork_group::run_forked(2, staging_body);
  std::printf("cuda_ipc different staging sizes -> mismatch: %s\n", s == 0 ? "passed" : "FAILED");
  rc |= s;
  return rc ? 1 : 0;
}
