// SPDX-License-Identifier: Apache-2.0
// The compression codecs' device kernels on a real GPU, bitwise against their host twins:
// int8 (block scales, codes with residual, decode of summed codes, a NaN block and a zero
// block), top-k (radix select with many ties, with and without error feedback's `add`,
// gather with the residual cleared, rank-ordered scatter-add, a peer's index past the
// bucket refused without a write) and PowerSGD (seeded Q,
// M Q with `add`, Gram-Schmidt, M^T P, P Q^T with the residual), float and double.
// Exits 77 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <gradsync/core/dtype.hpp>
#include <gradsync/core/error.hpp>
#include <gradsync/kernels/lowrank.cuh>
#include <gradsync/kernels/lowrank.hpp>
#include <gradsync/kernels/quantize.cuh>
#include <gradsync/kernels/quantize.hpp>
#include <gradsync/kernels/rounding.hpp>
#include <gradsync/kernels/select.cuh>
#include <gradsync/kernels/select.hpp>

#include "gpu_test.hpp"

namespace gk = gradsync::kernels;
namespace dev = gradsync::kernels::device;

namespace {

// Bitwise, except that two NaNs match: x86 makes the negative default NaN, CUDA the
// positive one, and a NaN block decodes to NaN on both (never to a finite value).
template <class T>
bool same_element(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) && std::isnan(b)) return true;
  }
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}
template <class T>
const char* type_name() {
  return gradsync::dtype_name(gradsync::dtype_of<T>::value).data();  // a literal: 0-terminated
}
template <class T>
std::size_t first_diff(const std::vector<T>& a, const std::vector<T>& b) {
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!same_element(a[i], b[i])) return i;
  }
  return a.size() == b.size() ? a.size() : std::min(a.size(), b.size());
}
template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && first_diff(a, b) == a.size();
}
#define SAME(a, b, ...)                                                                      \
  GPU_CHECK(same(a, b), "%s: first difference at %zu of %zu", __VA_ARGS__, first_diff(a, b), \
            (a).size())

// Gradient-like values; `coarse` puts them on a grid of 64 values so top-k meets ties.
template <class T>
std::vector<T> values(std::size_t n, unsigned seed, bool coarse) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) {
    const double d = g(rng);
    x = static_cast<T>(coarse ? std::round(d * 16) / 16 : d * 1e-3);
  }
  return v;
}

template <class T>
void int8_case(std::size_t n, std::size_t block, int levels) {
  std::vector<T> x = values<T>(n, 7, false);
  for (std::size_t i = 0; i < block && i < n; ++i) x[i] = T(0);               // block 0: all zero
  if (n > 3 * block) x[2 * block + 5] = std::numeric_limits<T>::quiet_NaN();  // block 2: NaN
  const std::size_t nb = (n + block - 1) / block;
  std::vector<float> hs(nb);
  gk::block_absmax(hs.data(), x.data(), n, block);
  std::vector<std::int8_t> hc(n);
  std::vector<T> hr(n);
  gk::quantize_blocks(hc.data(), hr.data(), x.data(), hs.data(), n, block, levels);
  std::vector<T> hd(n);
  gk::dequantize_blocks(hd.data(), hc.data(), hs.data(), n, block, levels, 4);

  T* dx = gpu_test::to_device(x);
  float* ds = gpu_test::to_device(std::vector<float>(nb));
  std::int8_t* dc = gpu_test::to_device(std::vector<std::int8_t>(n));
  T* dr = gpu_test::to_device(std::vector<T>(n));
  dev::block_absmax(ds, dx, n, block, nullptr);
  dev::quantize_blocks(dc, dr, dx, ds, n, block, levels, nullptr);
  dev::dequantize_blocks(dx, dc, ds, n, block, levels, 4, nullptr);
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  const char* t = type_name<T>();
  SAME(gpu_test::to_host(ds, nb), hs, "int8 block scales");
  SAME(gpu_test::to_host(dc, n), hc, "int8 codes");
  SAME(gpu_test::to_host(dr, n), hr, "int8 residual");
  SAME(gpu_test::to_host(dx, n), hd, "int8 decode / 4");
  std::printf("int8 %s n=%zu block=%zu levels=%d: checked\n", t, n, block, levels);
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(ds), static_cast<void*>(dc),
                  static_cast<void*>(dr)}) {
    cudaFree(p);
  }
}

template <class T>
void topk_case(std::size_t n, std::size_t k, bool coarse, bool with_add) {
  const std::vector<T> x0 = values<T>(n, 11, coarse);
  const std::vector<T> add = values<T>(n, 13, coarse);
  // Host: the indices (of x + add with error feedback), the values sent and the residual.
  std::vector<T> hx = x0;
  std::vector<std::uint32_t> hi(k);
  gk::topk_scratch<T> ws;
  gk::topk_indices(hi.data(), hx.data(), n, k, ws, with_add ? add.data() : nullptr);
  const T scale = T(0.25);
  std::vector<T> hv(k), hres = hx;
  for (std::size_t j = 0; j < k; ++j) {
    hv[j] = gk::mul_rn(hx[hi[j]], scale);
    hres[hi[j]] = T(0);
  }
  // Decode: two ranks' blocks (this one and its mirror) added in rank order into zeros.
  std::vector<std::uint32_t> mirror(k);
  for (std::size_t j = 0; j < k; ++j) mirror[j] = static_cast<std::uint32_t>(n - 1 - hi[j]);
  std::vector<T> hsum(n, T(0));
  for (const auto* ix : {&hi, &mirror}) {
    for (std::size_t j = 0; j < k; ++j) hsum[(*ix)[j]] = gk::add_rn(hsum[(*ix)[j]], hv[j]);
  }

  T* dx = gpu_test::to_device(x0);
  T* dadd = gpu_test::to_device(add);
  std::uint32_t* di = gpu_test::to_device(std::vector<std::uint32_t>(k));
  T* dv = gpu_test::to_device(std::vector<T>(k));
  T* dsum = gpu_test::to_device(std::vector<T>(n, T(0)));
  dev::topk_buffers<T> buf;
  dev::topk_indices(di, dx, n, k, buf, with_add ? dadd : nullptr, nullptr);
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<std::uint32_t> got_i = gpu_test::to_host(di, k);
  const std::vector<T> got_x = gpu_test::to_host(dx, n);
  T* dres = gpu_test::to_device(got_x);
  dev::topk_gather(dv, dres, dx, di, k, scale, nullptr);
  std::uint32_t* dmirror = gpu_test::to_device(mirror);
  unsigned long long* dfault = gpu_test::to_device(std::vector<unsigned long long>(2));
  dev::topk_clear_faults(dfault, 2, nullptr);
  dev::topk_scatter_add(dsum, n, dv, di, k, dfault, nullptr);
  dev::topk_scatter_add(dsum, n, dv, dmirror, k, dfault + 1, nullptr);
  dev::topk_raise_faults(dfault, 2, n, 0, nullptr);  // sound blocks: no error
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  char what[96];
  std::snprintf(what, sizeof what, "top-k %s n=%zu k=%zu%s%s", type_name<T>(), n, k,
                coarse ? " ties" : "", with_add ? " +add" : "");
  SAME(got_i, hi, what);
  SAME(got_x, hx, what);
  SAME(gpu_test::to_host(dv, k), hv, what);
  SAME(gpu_test::to_host(dres, n), hres, what);
  SAME(gpu_test::to_host(dsum, n), hsum, what);
  std::printf("%s: checked\n", what);
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dadd), static_cast<void*>(di),
                  static_cast<void*>(dv), static_cast<void*>(dres), static_cast<void*>(dsum),
                  static_cast<void*>(dmirror), static_cast<void*>(dfault)}) {
    cudaFree(p);
  }
}

// A peer's block with an index past the bucket (issue 54): the scatter writes nothing
// outside x (the guard elements past it stay 0), adds the sound entries, and
// topk_raise_faults names the peer, the position and the index.
template <class T>
void topk_bad_index_case() {
  const std::size_t n = 1000, guard = 64;
  const std::vector<std::uint32_t> good{1, 5, 9}, bad{2, 7, static_cast<std::uint32_t>(n + 3)};
  const std::vector<T> val{T(1), T(2), T(3)};
  T* dx = gpu_test::to_device(std::vector<T>(n + guard, T(0)));
  T* dv = gpu_test::to_device(val);
  std::uint32_t* dgood = gpu_test::to_device(good);
  std::uint32_t* dbad = gpu_test::to_device(bad);
  unsigned long long* dfault = gpu_test::to_device(std::vector<unsigned long long>(3));
  dev::topk_clear_faults(dfault, 3, nullptr);
  dev::topk_scatter_add(dx, n, dv, dgood, good.size(), dfault, nullptr);
  dev::topk_scatter_add(dx, n, dv, dbad, bad.size(), dfault + 2, nullptr);
  std::string what;
  try {
    dev::topk_raise_faults(dfault, 3, n, 1, nullptr);
  } catch (const gradsync::error& e) {
    GPU_CHECK(e.code() == gradsync::errc::mismatch, "%s", e.what());
    what = e.what();
  }
  GPU_CHECK(what.find("rank 2 sent index 1003 at position 2") != std::string::npos,
            "topk bad index %s: error '%s'", type_name<T>(), what.c_str());
  std::vector<T> want(n + guard, T(0));
  want[1] = T(1), want[5] = T(2), want[9] = T(3), want[2] = T(1), want[7] = T(2);
  SAME(gpu_test::to_host(dx, n + guard), want, "topk bad index: only the sound entries added");
  std::printf("top-k bad index %s: checked\n", type_name<T>());
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dv), static_cast<void*>(dgood),
                  static_cast<void*>(dbad), static_cast<void*>(dfault)}) {
    cudaFree(p);
  }
}

template <std::size_t R, class T>
void lowrank_case(std::size_t rows, std::size_t cols) {
  const std::vector<T> m0 = values<T>(rows * cols, 17, false);
  const std::vector<T> add = values<T>(rows * cols, 19, false);
  const T scale = T(0.5);
  // Host: seeded Q, P = (M + add) Q, orthonormalise P, Q = M^T P, M = scale P Q^T with
  // the residual against this rank's own Q (here: the seeded one).
  std::vector<T> hq(R * cols), hq0(R * cols), hp(R * rows), hm = m0, hres(rows * cols);
  gk::seeded_uniform(hq.data(), R * cols, 42);
  hq0 = hq;
  gk::lowrank_mq<R>(hp.data(), hm.data(), add.data(), hq.data(), rows, cols);
  const std::vector<T> hp_raw = hp, hm_added = hm;
  gk::orthonormalise(hp.data(), rows, R);
  gk::lowrank_mtp<R>(hq.data(), hm.data(), hp.data(), rows, cols);
  gk::lowrank_pqt<R>(hm.data(), hres.data(), hp.data(), hq.data(), hq0.data(), rows, cols, scale);

  T* dq = gpu_test::to_device(std::vector<T>(R * cols));
  T* dq0 = gpu_test::to_device(std::vector<T>(R * cols));
  T* dp = gpu_test::to_device(std::vector<T>(R * rows));
  T* dm = gpu_test::to_device(m0);
  T* dadd = gpu_test::to_device(add);
  T* dres = gpu_test::to_device(std::vector<T>(rows * cols));
  char what[96];
  std::snprintf(what, sizeof what, "PowerSGD %s rank %zu, %zu x %zu", type_name<T>(), R, rows,
                cols);
  dev::seeded_uniform(dq, R * cols, 42, nullptr);
  dev::seeded_uniform(dq0, R * cols, 42, nullptr);
  dev::lowrank_mq<R>(dp, dm, dadd, dq, rows, cols, nullptr);
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  SAME(gpu_test::to_host(dq0, R * cols), hq0, what);
  SAME(gpu_test::to_host(dp, R * rows), hp_raw, what);
  SAME(gpu_test::to_host(dm, rows * cols), hm_added, what);
  dev::orthonormalise(dp, rows, R, nullptr);
  dev::lowrank_mtp<R>(dq, dm, dp, rows, cols, nullptr);
  dev::lowrank_pqt<R>(dm, dres, dp, dq, dq0, rows, cols, scale, nullptr);
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  SAME(gpu_test::to_host(dp, R * rows), hp, what);
  SAME(gpu_test::to_host(dq, R * cols), hq, what);
  SAME(gpu_test::to_host(dm, rows * cols), hm, what);
  SAME(gpu_test::to_host(dres, rows * cols), hres, what);
  std::printf("%s: checked\n", what);
  for (T* p : {dq, dq0, dp, dm, dadd, dres}) cudaFree(p);
}

template <class T>
void all_for() {
  int8_case<T>(100003, 256, 127 / 4);
  int8_case<T>(5000, 100, 127);
  for (bool coarse : {false, true}) {
    for (bool with_add : {false, true}) {
      for (std::size_t k : {std::size_t{1}, std::size_t{1000}, std::size_t{99999}}) {
        topk_case<T>(100003, k, coarse, with_add);
      }
    }
  }
  topk_bad_index_case<T>();
  lowrank_case<1, T>(300, 77);
  lowrank_case<4, T>(513, 200);
}

}  // namespace

int main() {
  GPU_REQUIRE_DEVICE("test_compress_kernels");
  try {
    all_for<float>();
    all_for<double>();
  } catch (const std::exception& e) {
    std::printf("exception: %s\n", e.what());
    return 1;
  }
  return gpu_test::finish("test_compress_kernels");
}
