// SPDX-License-Identifier: Apache-2.0
// The elementwise and pack kernels on a real GPU, checked bitwise against the host path:
// reduce-into (every type and op, aligned and misaligned, fused avg), multi-source
// reduce, casts over every 16-bit pattern and a sweep of float patterns (specials,
// subnormals, ties), scale, and batched pack/unpack. Exits 77 without a GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <gradsync/core/dtype.hpp>
#include <gradsync/kernels/elementwise.cuh>
#include <gradsync/kernels/host.hpp>
#include <gradsync/kernels/pack.cuh>
#include <gradsync/testing/exact_inputs.hpp>

#include "gpu_test.hpp"

namespace gs = gradsync;
namespace dev = gradsync::kernels::device;

namespace {

template <class T>
struct dbuf {  // device buffer with slack so it can start at any element offset
  T* base = nullptr;
  std::size_t n;
  explicit dbuf(std::size_t count) : n(count + 64) {
    GRADSYNC_CUDA_CHECK(cudaMalloc(&base, n * sizeof(T)));
  }
  ~dbuf() { cudaFree(base); }
  T* at(std::size_t off) { return base + off; }
};

template <class T>
void up(T* d, const std::vector<T>& h) {
  GRADSYNC_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
std::vector<T> down(const T* d, std::size_t n) {
  std::vector<T> h(n);
  GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
  GRADSYNC_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T, class Op>
void reduce_case(Op op) {
  const std::size_t n = (1 << 20) + 3, ranks = 4, w = 16 / sizeof(T);
  std::vector<T> a(n), b(n);
  gs::testing::fill_inputs(std::span<T>(a), Op::id, 0, ranks);
  gs::testing::fill_inputs(std::span<T>(b), Op::id, 1, ranks);
  std::vector<T> want = a;
  gs::kernels::reduce_into(want.data(), b.data(), n, op);
  std::vector<T> want_fin = want;
  gs::kernels::finalize(want_fin.data(), n, ranks, op);
  for (std::size_t off : {std::size_t{0}, std::size_t{1}, w - 1}) {
    for (std::size_t soff : {off, (off + 1) % w}) {
      dbuf<T> d(n), s(n);
      up(d.at(off), a);
      up(s.at(soff), b);
      dev::reduce_into(d.at(off), s.at(soff), n, op, nullptr);
      GPU_CHECK(same(down(d.at(off), n), want), "reduce_into %s op %d dst+%zu src+%zu",
                std::string(gs::dtype_name(gs::dtype_of<T>::value)).c_str(), int(Op::id), off,
                soff);
      up(d.at(off), a);
      dev::reduce_into(d.at(off), s.at(soff), n, op, nullptr, ranks);  // fused finalize
      GPU_CHECK(same(down(d.at(off), n), want_fin), "fused reduce_into %s op %d",
                std::string(gs::dtype_name(gs::dtype_of<T>::value)).c_str(), int(Op::id));
    }
  }
  // Multi-source reduce, 2..8 sources, must give the exact result.
  for (std::size_t k = 2; k <= gs::kernels::body::max_sources; k += 3) {
    std::vector<dbuf<T>*> bufs;
    gs::kernels::body::sources<T> in{};
    in.count = k;
    for (std::size_t r = 0; r < k; ++r) {
      bufs.push_back(new dbuf<T>(n));
      std::vector<T> h(n);
      gs::testing::fill_inputs(std::span<T>(h), Op::id, r, k);
      up(bufs[r]->at(0), h);
      in.p[r] = bufs[r]->at(0);
    }
    dev::reduce_sources(bufs[0]->at(0), in, n, op, nullptr);  // output aliases source 0
    const auto got = down(bufs[0]->at(0), n);
    GPU_CHECK(gs::testing::count_wrong(std::span<const T>(got), Op::id, k) == 0,
              "reduce_sources k=%zu", k);
    for (auto* p : bufs) delete p;
  }
}

template <class T>
void all_ops() {
  reduce_case<T>(gs::op::sum);
  reduce_case<T>(gs::op::prod);
  reduce_case<T>(gs::op::min);
  reduce_case<T>(gs::op::max);
  if constexpr (gs::is_floating_element_v<T>) reduce_case<T>(gs::op::avg);
}

float f_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void cast_case() {
  // Every float whose low 13 bits are one of a few patterns covers all half and bfloat16
  // rounding cases (below, at and above each tie) across every exponent, plus randoms.
  std::vector<float> in;
  for (std::uint64_t hi = 0; hi < (1u << 19); ++hi) {
    for (std::uint32_t lo : {0x0000u, 0x0fffu, 0x1000u, 0x1001u, 0x17ffu}) {
      in.push_back(f_of(static_cast<std::uint32_t>(hi << 13) | lo));
    }
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 1000000; ++i) in.push_back(f_of(static_cast<std::uint32_t>(rng())));
  const std::size_t n = in.size();
  std::vector<gs::half> wh(n);
  std::vector<gs::bfloat16> wb(n);
  gs::kernels::cast(wh.data(), in.data(), n);
  gs::kernels::cast(wb.data(), in.data(), n);
  dbuf<float> src(n);
  dbuf<gs::half> h(n);
  dbuf<gs::bfloat16> b(n);
  up(src.at(0), in);
  dev::cast(h.at(0), src.at(0), n, nullptr);
  dev::cast(b.at(0), src.at(0), n, nullptr);
  GPU_CHECK(same(down(h.at(0), n), wh), "float -> half differs from the host path");
  GPU_CHECK(same(down(b.at(0), n), wb), "float -> bfloat16 differs from the host path");
  // Every 16-bit pattern back to float.
  std::vector<gs::half> all_h(0x10000);
  std::vector<gs::bfloat16> all_b(0x10000);
  for (std::uint32_t i = 0; i < 0x10000u; ++i) {
    all_h[i] = gs::half::from_bits(static_cast<std::uint16_t>(i));
    all_b[i] = gs::bfloat16::from_bits(static_cast<std::uint16_t>(i));
  }
  std::vector<float> fh(0x10000), fb(0x10000);
  gs::kernels::cast(fh.data(), all_h.data(), fh.size());
  gs::kernels::cast(fb.data(), all_b.data(), fb.size());
  up(h.at(1), all_h);  // misaligned start: exercises the head/tail path
  up(b.at(0), all_b);
  dev::cast(src.at(1), h.at(1), 0x10000, nullptr);
  GPU_CHECK(same(down(src.at(1), 0x10000), fh), "half -> float differs from the host path");
  dev::cast(src.at(0), b.at(0), 0x10000, nullptr);
  GPU_CHECK(same(down(src.at(0), 0x10000), fb), "bfloat16 -> float differs from the host path");
}

void scale_and_pack_case() {
  const std::size_t n = 100003;
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) - 500.0f;
  std::vector<float> want = v;
  gs::kernels::scale(want.data(), n, 0.125f);
  dbuf<float> d(n);
  up(d.at(2), v);
  dev::scale(d.at(2), n, 0.125f, nullptr);
  GPU_CHECK(same(down(d.at(2), n), want), "scale");

  // 400 tensors of odd sizes packed into one flat buffer and back, one launch each way.
  std::mt19937 rng(11);
  std::vector<gs::kernels::tensor_slot> slots, back;
  std::size_t total = 0;
  std::vector<std::vector<unsigned char>> host;
  dbuf<unsigned char> pool(8 << 20), pool2(8 << 20);
  std::size_t pos = 0;
  for (int i = 0; i < 400; ++i) {
    const std::size_t bytes = i % 40 == 0 ? 200000 : 1 + rng() % 5000;
    host.emplace_back(bytes);
    for (auto& c : host.back()) c = static_cast<unsigned char>(rng());
    pos += rng() % 2 ? (16 - pos % 16) % 16 : rng() % 7;
    up(pool.at(pos), host.back());
    total += rng() % 2 ? (16 - total % 16) % 16 : 0;
    slots.push_back({pool.at(pos), bytes, total});
    back.push_back({pool2.at(pos), bytes, total});
    pos += bytes;
    total += bytes;
  }
  dbuf<unsigned char> flat(total);
  auto run = [&](const std::vector<gs::kernels::copy_piece>& t) {
    gs::kernels::copy_piece* dt = nullptr;
    GRADSYNC_CUDA_CHECK(cudaMalloc(&dt, t.size() * sizeof(t[0])));
    GRADSYNC_CUDA_CHECK(cudaMemcpy(dt, t.data(), t.size() * sizeof(t[0]), cudaMemcpyHostToDevice));
    dev::copy_pieces(dt, t.size(), nullptr);
    GRADSYNC_CUDA_CHECK(cudaDeviceSynchronize());
    cudaFree(dt);
  };
  run(gs::kernels::make_pack_pieces(slots, flat.at(0), false));
  run(gs::kernels::make_pack_pieces(back, flat.at(0), true));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    bad += !same(down(static_cast<unsigned char*>(back[i].ptr), back[i].bytes), host[i]);
  }
  GPU_CHECK(bad == 0, "%zu tensors differ after pack + unpack", bad);
}

}  // namespace

int main() {
  GPU_REQUIRE_DEVICE("test_device_kernels");
  try {
    all_ops<float>();
    all_ops<double>();
    all_ops<gs::half>();
    all_ops<gs::bfloat16>();
    all_ops<std::int32_t>();
    all_ops<std::int64_t>();
    cast_case();
    scale_and_pack_case();
  } catch (const std::exception& e) {
    std::printf("exception: %s\n", e.what());
    return 1;
  }
  return gpu_test::finish("test_device_kernels");
}
