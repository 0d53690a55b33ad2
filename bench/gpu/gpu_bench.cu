// SPDX-License-Identifier: Apache-2.0
// GPU benchmarks for bench/gpu_check.sh (one binary, three modes):
//   gpu_bench kernels [MiB]   D2D copy vs reduce-into (float, bf16) and casts, GB/s
//   gpu_bench ipc N           cuda_ipc allreduce, N processes on GPU 0: #wrong, busbw
//   gpu_bench nccl            transport::nccl, one rank: native + nccl_ring, #wrong, algbw
// Bandwidth counts the bytes each kernel must move (every input read once, the output
// written once) over the median of 10 timed runs (CUDA events) after 3 warm-ups.
// Inputs are exactly representable (testing/exact_inputs.hpp), never zeros.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gradsync/allreduce.hpp>
#include <gradsync/kernels/elementwise.cuh>
#include <gradsync/algo/native.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/cuda_ipc.hpp>
#include <gradsync/transport/cuda_ipc/fork.hpp>
#if defined(GRADSYNC_BENCH_NCCL)
#include <gradsync/transport/nccl.hpp>
#include <gradsync/transport/nccl/group.hpp>
#include <gradsync/algo/nccl_ring.hpp>
#endif

namespace gs = gradsync;
namespace dev = gradsync::kernels::device;

namespace {

template <class F>
double median_ms(F f, int reps = 10) {
  cudaEvent_t a, b;
  GRADSYNC_CUDA_CHECK(cudaEventCreate(&a));
  GRADSYNC_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    GRADSYNC_CUDA_CHECK(cudaEventRecord(a));
    f();
    GRADSYNC_CUDA_CHECK(cudaEventRecord(b));
    GRADSYNC_CUDA_CHECK(cudaEventSynchronize(b));
    float x = 0;
    GRADSYNC_CUDA_CHECK(cudaEventElapsedTime(&x, a, b));
    ms.push_back(x);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2];
}

template <class T>
T* dev_filled(std::size_t n, std::size_t rank) {
  std::vector<T> h(n);
  gs::testing::fill_inputs(std::span<T>(h), gs::reduce_op::sum, rank, 4);
  T* d = nullptr;
  GRADSYNC_CUDA_CHECK(cudaMalloc(&d, n * sizeof(T)));
  GRADSYNC_CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

int kernels_mode(std::size_t mib) {
  const std::size_t bytes = mib << 20;
  char *a = nullptr, *b = nullptr;
  GRADSYNC_CUDA_CHECK(cudaMalloc(&a, bytes));
  GRADSYNC_CUDA_CHECK(cudaMalloc(&b, bytes));
  GRADSYNC_CUDA_CHECK(cudaMemset(a, 1, bytes));
  const double copy_ms = median_ms([&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
  const double copy_gbs = 2.0 * bytes / copy_ms / 1e6;  // read + write
  cudaFree(a);
  cudaFree(b);
  std::printf("KERNELS size %zu MiB per buffer\n", mib);
  std::printf("%-28s %10s %10s %8s\n", "kernel", "time_ms", "GB/s", "vs_copy");
  std::printf("%-28s %10.3f %10.1f %8.2f\n", "D2D copy (read+write)", copy_ms, copy_gbs, 1.0);
  auto row = [&](const char* name, double ms, double moved) {
    const double gbs = moved / ms / 1e6;
    std::printf("%-28s %10.3f %10.1f %8.2f\n", name, ms, gbs, gbs / copy_gbs);
  };
  {  // reduce-into float: read dst + src, write dst
    const std::size_t n = bytes / 4;
    float* d = dev_filled<float>(n, 0);
    float* s = dev_filled<float>(n, 1);
    row("reduce_into float sum",
        median_ms([&] { dev::reduce_into(d, s, n, gs::op::sum, nullptr); }), 3.0 * bytes);
    cudaFree(d);
    cudaFree(s);
  }
  {
    const std::size_t n = bytes / 2;
    auto* d = dev_filled<gs::bfloat16>(n, 0);
    auto* s = dev_filled<gs::bfloat16>(n, 1);
    row("reduce_into bf16 sum", median_ms([&] { dev::reduce_into(d, s, n, gs::op::sum, nullptr); }),
        3.0 * bytes);
    row("reduce_into bf16 avg (fused)",
        median_ms([&] { dev::reduce_into(d, s, n, gs::op::avg, nullptr, 2); }), 3.0 * bytes);
    cudaFree(d);
    cudaFree(s);
  }
  {  // casts: 1 GiB of float in, half as many bytes out (and back)
    const std::size_t n = bytes / 4;
    float* f = dev_filled<float>(n, 0);
    gs::bfloat16* h = nullptr;
    gs::half* hh = nullptr;
    GRADSYNC_CUDA_CHECK(cudaMalloc(&h, n * 2));
    GRADSYNC_CUDA_CHECK(cudaMalloc(&hh, n * 2));
    row("cast float->bf16", median_ms([&] { dev::cast(h, f, n, nullptr); }), 6.0 * n);
    row("cast float->half", median_ms([&] { dev::cast(hh, f, n, nullptr); }), 6.0 * n);
    row("cast bf16->float", median_ms([&] { dev::cast(f, h, n, nullptr); }), 6.0 * n);
    row("scale float", median_ms([&] { dev::scale(f, n, 0.5f, nullptr); }), 2.0 * bytes);
    cudaFree(f);
    cudaFree(h);
    cudaFree(hh);
  }
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}

int ipc_body(gs::transport::fork_group& g) {
  const std::string why = gs::cuda::unusable_reason();
  if (!why.empty()) return 77;
  gs::transport::cuda_ipc t{g, 0, 64 << 20};
  const std::size_t n = g.size();
  int bad = 0;
  if (g.rank() == 0) {
    std::printf("CUDA_IPC %zu processes on GPU 0 (float sum; busbw = algbw * 2(n-1)/n)\n", n);
    std::printf("%12s %9s %10s %10s %10s %7s %6s\n", "bytes", "algo", "time_us", "algbw", "busbw",
                "#wrong", "same");
  }
  for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20,
                            std::size_t{128} << 20}) {
    for (int two = 0; two < 2; ++two) {
      if (!two && bytes > (1u << 20)) continue;  // one-shot is for small inputs
      const std::size_t count = bytes / 4;
      std::vector<float> h(count);
      float* d = nullptr;
      GRADSYNC_CUDA_CHECK(cudaMalloc(&d, bytes));
      auto once = [&] {
        const gs::call_context ctx{gs::deadline::after(gs::seconds_d{60}), t.next_seq(), 0};
        if (two)
          t.two_shot(d, count, gs::op::sum, ctx);
        else
          t.one_shot(d, count, gs::op::sum, ctx);
        t.synchronize(ctx.until);
      };
      // Correctness on exact inputs, then timing (inputs reset each time is not needed
      // for timing: the values only grow, never overflow a float in a few runs of 4 ranks).
      gs::testing::fill_inputs(std::span<float>(h), gs::reduce_op::sum, g.rank(), n);
      GRADSYNC_CUDA_CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
      g.barrier();
      once();
      GRADSYNC_CUDA_CHECK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
      const std::size_t wrong =
          gs::testing::count_wrong(std::span<const float>(h), gs::reduce_op::sum, n);
      std::vector<std::uint64_t> hs(n);
      const std::uint64_t mine = gs::testing::fnv1a64(h.data(), bytes);
      g.allgather(&mine, hs.data(), sizeof mine);
      const bool same = std::all_of(hs.begin(), hs.end(), [&](auto x) { return x == hs[0]; });
      const int reps = bytes >= (16u << 20) ? 5 : 20;
      std::vector<double> us;
      for (int i = 0; i < reps; ++i) {
        g.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        once();
        us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      std::sort(us.begin(), us.end());
      const double med = us[us.size() / 2];
      const double alg = bytes / med / 1e3;
      if (g.rank() == 0) {
        std::printf("%12zu %9s %10.1f %10.2f %10.2f %7zu %6s\n", bytes,
                    two ? "two-shot" : "one-shot", med, alg, alg * 2.0 * (n - 1) / n, wrong,
                    same ? "yes" : "NO");
      }
      bad += wrong != 0 || !same;
      cudaFree(d);
    }
  }
  g.barrier();
  return bad ? 1 : 0;
}

#if defined(GRADSYNC_BENCH_NCCL)
int nccl_mode() {
  const int devs[1] = {0};
  auto comms = gs::transport::nccl_comms_for_devices(devs);
  gs::transport::nccl t{comms[0], 0};
  std::printf(
      "NCCL one rank on GPU 0 (float sum; algbw only: one rank moves no bytes between GPUs)\n");
  std::printf("%12s %10s %10s %10s %7s\n", "bytes", "algo", "time_us", "algbw", "#wrong");
  int bad = 0;
  for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{256} << 20}) {
    const std::size_t count = bytes / 4;
    for (int ring = 0; ring < 2; ++ring) {
      std::vector<float> h(count);
      gs::testing::fill_inputs(std::span<float>(h), gs::reduce_op::avg, 0, 1);
      float* d = nullptr;
      GRADSYNC_CUDA_CHECK(cudaMalloc(&d, bytes));
      GRADSYNC_CUDA_CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
      auto once = [&] {
        if (ring)
          gs::allreduce<gs::algo::nccl_ring>(t, gs::device_span<float>(d, count), gs::op::avg);
        else
          gs::allreduce<gs::algo::native>(t, gs::device_span<float>(d, count), gs::op::avg);
      };
      once();
      t.synchronize(gs::deadline::after(gs::seconds_d{60}));
      GRADSYNC_CUDA_CHECK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
      const std::size_t wrong =
          gs::testing::count_wrong(std::span<const float>(h), gs::reduce_op::avg, 1);
      cudaStream_t s = t.stream();
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      std::vector<float> ms;
      for (int i = 0; i < 10; ++i) {
        cudaEventRecord(a, s);
        once();
        cudaEventRecord(b, s);
        cudaEventSynchronize(b);
        float x = 0;
        cudaEventElapsedTime(&x, a, b);
        ms.push_back(x);
      }
      std::sort(ms.begin(), ms.end());
      const double us = ms[5] * 1e3;
      std::printf("%12zu %10s %10.1f %10.2f %7zu\n", bytes, ring ? "nccl_ring" : "native", us,
                  bytes / us / 1e3, wrong);
      bad += wrong != 0;
      cudaFree(d);
    }
  }
  return bad ? 1 : 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "kernels";
  try {
    if (mode == "ipc") {
      const std::size_t n = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 2;
      return gs::transport::fork_group::run_forked(n, ipc_body);  // fork before any CUDA call
    }
    const std::string why = gs::cuda::unusable_reason();
    if (!why.empty()) {
      std::printf("gpu_bench: no usable CUDA GPU: %s\n", why.c_str());
      return 77;
    }
    if (mode == "kernels")
      return kernels_mode(argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1024);
#if defined(GRADSYNC_BENCH_NCCL)
    if (mode == "nccl") return nccl_mode();
#else
    if (mode == "nccl") {
      std::printf("gpu_bench: built without NCCL\n");
      return 77;
    }
#endif
  } catch (const std::exception& e) {
    std::printf("gpu_bench %s: error: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::printf("usage: gpu_bench kernels [MiB] | ipc N | nccl\n");
  return 2;
}
