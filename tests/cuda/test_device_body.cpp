// SPDX-License-Identifier: Apache-2.0
// The GPU kernels' thread bodies (kernels/device_body.hpp, device_pack.hpp) run on the CPU
// through Thrust's CPP device system, compiled by the host compiler: the same head /
// 16-byte-vector / tail split and the same functors the GPU runs, checked bitwise against
// the host path (kernels/host.hpp) on exactly representable inputs, and the 16-bit casts
// checked against CUDA's own host conversions (cuda_fp16.h / cuda_bf16.h), which NVIDIA
// documents as round-to-nearest-even with canonical NaNs, like the device cvt.rn.
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <doctest/doctest.h>
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <gradsync/core/dtype.hpp>
#include <gradsync/core/op.hpp>
#include <gradsync/kernels/device_body.hpp>
#include <gradsync/kernels/device_ipc_body.hpp>
#include <gradsync/kernels/device_pack.hpp>
#include <gradsync/kernels/host.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/testing/float_probes.hpp>

namespace gs = gradsync;
namespace body = gradsync::kernels::body;

namespace {

// Runs f(t, nt) for t = 0 .. nt-1 through Thrust's device system (CPP here): what a grid
// of nt threads does, one thread after another.
template <class F>
void run_threads(std::size_t nt, F f) {
  thrust::for_each(thrust::device, thrust::counting_iterator<std::size_t>(0),
                   thrust::counting_iterator<std::size_t>(nt), [&](std::size_t t) { f(t, nt); });
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Buffers with room to start at any element offset within 16 bytes (vector alignment).
template <class T>
struct padded {
  std::vector<T> storage;
  explicit padded(std::size_t n) : storage(n + 64) {}
  T* at(std::size_t elem_offset) {
    auto p = reinterpret_cast<std::uintptr_t>(storage.data());
    p = (p + 15) & ~std::uintptr_t{15};
    return reinterpret_cast<T*>(p) + elem_offset;
  }
};

template <class T, class Op>
void check_reduce_into(Op op) {
  const std::size_t n = 1000 + 13;  // not a multiple of any vector width
  const std::size_t ranks = 4;
  const std::size_t w = 16 / sizeof(T);
  for (std::size_t od : {std::size_t{0}, std::size_t{1}, w - 1}) {
    for (std::size_t os : {od, (od + 1) % w}) {  // equal and unequal misalignment
      for (std::size_t nt : {std::size_t{1}, std::size_t{37}, std::size_t{256}}) {
        padded<T> dev_d(n), dev_s(n);
        T* d = dev_d.at(od);
        T* s = dev_s.at(os);
        std::vector<T> host_d(n), host_s(n);
        gs::testing::fill_inputs(std::span<T>(host_d), Op::id, 0, ranks);
        gs::testing::fill_inputs(std::span<T>(host_s), Op::id, 1, ranks);
        std::memcpy(d, host_d.data(), n * sizeof(T));
        std::memcpy(s, host_s.data(), n * sizeof(T));
        // Host path: reduce then finalize. Device body: both fused in one pass.
        gs::kernels::reduce_into(host_d.data(), host_s.data(), n, op);
        gs::kernels::finalize(host_d.data(), n, ranks, op);
        run_threads(nt, [&](std::size_t t, std::size_t cnt) {
          body::reduce_into<T, Op, gs::kernels::needs_finalize_v<Op>>(
              d, s, n, static_cast<gs::kernels::compute_t<T>>(ranks), t, cnt);
        });
        std::vector<T> got(d, d + n);
        INFO("type " << gs::dtype_name(gs::dtype_of<T>::value) << " op " << static_cast<int>(Op::id)
                     << " dst+" << od << " src+" << os << " threads " << nt);
        CHECK(same_bits(got, host_d));
      }
    }
  }
}

template <class T, class Op>
void check_reduce_sources(Op) {
  const std::size_t n = 777;
  for (std::size_t k = 2; k <= body::max_sources; ++k) {
    std::vector<padded<T>> bufs;
    body::sources<T> in{};
    in.count = k;
    for (std::size_t r = 0; r < k; ++r) {
      bufs.emplace_back(n);
      gs::testing::fill_inputs(std::span<T>(bufs[r].at(0), n), Op::id, r, k);
    }
    for (std::size_t r = 0; r < k; ++r) in.p[r] = bufs[r].at(0);
    padded<T> out(n);
    run_threads(61, [&](std::size_t t, std::size_t cnt) {
      body::reduce_sources<T, Op>(out.at(0), in, n, t, cnt);
    });
    INFO("type " << gs::dtype_name(gs::dtype_of<T>::value) << " sources " << k);
    CHECK(gs::testing::count_wrong(std::span<const T>(out.at(0), n), Op::id, k) == 0);
  }
}

template <class T>
void all_ops() {
  check_reduce_into<T>(gs::op::sum);
  check_reduce_into<T>(gs::op::prod);
  check_reduce_into<T>(gs::op::min);
  check_reduce_into<T>(gs::op::max);
  check_reduce_sources<T>(gs::op::sum);
  check_reduce_sources<T>(gs::op::max);
  if constexpr (gs::is_floating_element_v<T>) {
    check_reduce_into<T>(gs::op::avg);
    check_reduce_sources<T>(gs::op::avg);
  }
}

std::uint16_t cuda_half_bits(float f) {
  return __half_raw(__float2half_rn(f)).x;
}
std::uint16_t cuda_bf16_bits(float f) {
  return __nv_bfloat16_raw(__float2bfloat16_rn(f)).x;
}
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("device reduce_into body == host loop, every type and op, any alignment") {
  all_ops<float>();
  all_ops<double>();
  all_ops<gs::half>();
  all_ops<gs::bfloat16>();
  all_ops<std::int32_t>();
  all_ops<std::int64_t>();
}

TEST_CASE("float -> half / bfloat16 casts round like CUDA's own conversions, bit for bit") {
  const std::vector<float> in = gs::testing::rounding_probe_floats();
  padded<float> src(in.size());
  std::memcpy(src.at(1), in.data(), in.size() * sizeof(float));  // start misaligned
  padded<gs::half> h(in.size());
  padded<gs::bfloat16> b(in.size());
  run_threads(97, [&](std::size_t t, std::size_t nt) {
    body::cast<float, gs::half>(h.at(1), src.at(1), in.size(), t, nt);
    body::cast<float, gs::bfloat16>(b.at(1), src.at(1), in.size(), t, nt);
  });
  std::size_t bad_h = 0, bad_b = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (h.at(1)[i].bits != cuda_half_bits(in[i])) {
      if (bad_h++ < 5) MESSAGE("half mismatch for float bits " << std::hex << bits_of(in[i]));
    }
    if (b.at(1)[i].bits != cuda_bf16_bits(in[i])) {
      if (bad_b++ < 5) MESSAGE("bf16 mismatch for float bits " << std::hex << bits_of(in[i]));
    }
  }
  CHECK(bad_h == 0);
  CHECK(bad_b == 0);
  // The documented special cases, spelled out.
  CHECK(gs::half(65520.0f).bits == 0x7c00u);       // ties to even -> inf
  CHECK(gs::half(5.9604645e-8f).bits == 0x0001u);  // smallest subnormal
  CHECK(gs::half(2.9802322e-8f).bits == 0x0000u);  // half of it: tie -> even 0
  CHECK(gs::half(std::numeric_limits<float>::quiet_NaN()).bits == 0x7fffu);
  CHECK(gs::bfloat16(-std::numeric_limits<float>::infinity()).bits == 0xff80u);
  CHECK(gs::bfloat16(std::numeric_limits<float>::quiet_NaN()).bits == 0x7fffu);
}

TEST_CASE("bfloat16 -> float cast: every element once, at any length, offset and thread count") {
  // Lengths around a grid-stride step's edges (37 threads x 8 elements) and a
  // misaligned start: head, vectors and tail each written once.
  for (std::size_t n : {std::size_t{1}, std::size_t{8}, std::size_t{9}, std::size_t{8 * 37 * 2 - 5},
                        std::size_t{8 * 37 * 2 + 8}, std::size_t{12345}}) {
    for (std::size_t off : {std::size_t{0}, std::size_t{3}}) {
      for (std::size_t nt : {std::size_t{1}, std::size_t{37}, std::size_t{256}}) {
        padded<gs::bfloat16> src(n);
        padded<float> dst(n);
        for (std::size_t i = 0; i < n; ++i) {
          src.at(off)[i] = gs::bfloat16(static_cast<float>(i % 251) - 125.0f);
          dst.at(off)[i] = -1000.0f;
        }
        run_threads(nt, [&](std::size_t t, std::size_t cnt) {
          body::cast<gs::bfloat16, float>(dst.at(off), src.at(off), n, t, cnt);
        });
        std::size_t bad = 0;
        for (std::size_t i = 0; i < n; ++i) {
          bad += dst.at(off)[i] != static_cast<float>(i % 251) - 125.0f;
        }
        INFO("n " << n << " offset " << off << " threads " << nt);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("half / bfloat16 -> float casts equal CUDA's for all 65536 patterns") {
  std::vector<gs::half> h(0x10000);
  std::vector<gs::bfloat16> b(0x10000);
  for (std::uint32_t i = 0; i < 0x10000u; ++i) {
    h[i] = gs::half::from_bits(static_cast<std::uint16_t>(i));
    b[i] = gs::bfloat16::from_bits(static_cast<std::uint16_t>(i));
  }
  std::vector<float> fh(h.size()), fb(b.size());
  run_threads(64, [&](std::size_t t, std::size_t nt) {
    body::cast<gs::half, float>(fh.data(), h.data(), h.size(), t, nt);
    body::cast<gs::bfloat16, float>(fb.data(), b.data(), b.size(), t, nt);
  });
  std::size_t bad = 0;
  for (std::uint32_t i = 0; i < 0x10000u; ++i) {
    __half_raw hr;
    hr.x = static_cast<unsigned short>(i);
    __nv_bfloat16_raw br;
    br.x = static_cast<unsigned short>(i);
    if (bits_of(fh[i]) != bits_of(__half2float(__half(hr)))) ++bad;
    if (bits_of(fb[i]) != bits_of(__bfloat162float(__nv_bfloat16(br)))) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("scale and finalize bodies == host loops") {
  const std::size_t n = 1031;
  padded<float> d(n);
  std::vector<float> ref(n);
  for (std::size_t i = 0; i < n; ++i) ref[i] = static_cast<float>(i) - 500.0f;
  std::memcpy(d.at(3), ref.data(), n * sizeof(float));
  gs::kernels::scale(ref.data(), n, 0.25f);
  run_threads(33, [&](std::size_t t, std::size_t nt) {
    body::map_in_place(d.at(3), n, gs::kernels::scale_fn<float>{0.25f}, t, nt);
  });
  CHECK(same_bits(std::vector<float>(d.at(3), d.at(3) + n), ref));

  padded<gs::bfloat16> hb(n);
  std::vector<gs::bfloat16> hr(n);
  for (std::size_t i = 0; i < n; ++i) hr[i] = gs::bfloat16(static_cast<float>(i % 64) * 3.0f);
  std::memcpy(hb.at(0), hr.data(), n * 2);
  gs::kernels::finalize(hr.data(), n, 3, gs::op::avg);
  run_threads(33, [&](std::size_t t, std::size_t nt) {
    body::map_in_place(hb.at(0), n, gs::kernels::finalize_fn<gs::bfloat16, gs::op::avg_t>{3.0f}, t,
                       nt);
  });
  CHECK(same_bits(std::vector<gs::bfloat16>(hb.at(0), hb.at(0) + n), hr));
  CHECK(static_cast<float>(hr[5]) == 5.0f);  // (5 * 3) / 3, exact
}

TEST_CASE("batched pack then unpack moves every byte, any size and alignment") {
  // 300 tensors of odd sizes (1 byte .. 150 KiB) at odd addresses, packed at odd offsets.
  std::mt19937 rng(7);
  std::vector<std::vector<unsigned char>> tensors;
  std::vector<gs::kernels::tensor_slot> slots;
  std::size_t flat_bytes = 0;
  for (int i = 0; i < 300; ++i) {
    const std::size_t bytes = i % 50 == 0 ? 150000 + rng() % 1000 : 1 + rng() % 3000;
    tensors.emplace_back(bytes + 16);
    for (auto& c : tensors.back()) c = static_cast<unsigned char>(rng());
    const std::size_t shift = rng() % 2 == 0 ? 0 : rng() % 16;
    flat_bytes += rng() % 2 == 0 ? (16 - flat_bytes % 16) % 16 : 0;  // aligned or not
    slots.push_back({tensors.back().data() + shift, bytes, flat_bytes});
    flat_bytes += bytes;
  }
  std::vector<unsigned char> flat(flat_bytes, 0xAB);
  auto run_table = [&](const std::vector<gs::kernels::copy_piece>& table) {
    for (std::size_t blk = 0; blk < 7; ++blk) {  // 7 blocks, grid-striding over pieces
      for (std::size_t p = blk; p < table.size(); p += 7) {
        run_threads(256,
                    [&](std::size_t t, std::size_t nt) { body::copy_piece_part(table[p], t, nt); });
      }
    }
  };
  const auto pack = gs::kernels::make_pack_pieces(slots, flat.data(), false);
  CHECK(pack.size() > slots.size());  // the big tensors were cut into pieces
  run_table(pack);
  std::size_t bad = 0;
  for (const auto& s : slots) {
    bad += std::memcmp(flat.data() + s.offset, s.ptr, s.bytes) != 0;
  }
  CHECK(bad == 0);
  // Unpack into fresh buffers.
  std::vector<std::vector<unsigned char>> back;
  std::vector<gs::kernels::tensor_slot> back_slots;
  for (const auto& s : slots) {
    back.emplace_back(s.bytes + 16, 0);
    back_slots.push_back({back.back().data() + (s.offset % 3), s.bytes, s.offset});
  }
  run_table(gs::kernels::make_pack_pieces(back_slots, flat.data(), true));
  for (std::size_t i = 0; i < slots.size(); ++i) {
    bad += std::memcmp(back_slots[i].ptr, slots[i].ptr, slots[i].bytes) != 0;
  }
  CHECK(bad == 0);
}

TEST_CASE("cuda_ipc one-shot and two-shot phases: exact and bitwise identical on every rank") {
  // Each rank's staging buffer and output; the phases run rank after rank, in the order
  // the kernels' barriers impose (all reduce phases, then all gather phases).
  for (std::size_t n = 2; n <= body::max_sources; ++n) {
    for (std::size_t count : {std::size_t{5}, std::size_t{1000}, std::size_t{4099}}) {
      std::vector<padded<float>> staging, out;
      std::vector<float*> data(n);
      for (std::size_t r = 0; r < n; ++r) {
        staging.emplace_back(count);
        out.emplace_back(count);
      }
      for (std::size_t r = 0; r < n; ++r) {
        data[r] = staging[r].at(0);
        gs::testing::fill_inputs(std::span<float>(data[r], count), gs::reduce_op::avg, r, n);
      }
      std::vector<std::vector<float>> one(n);
      for (std::size_t r = 0; r < n; ++r) {
        run_threads(50, [&](std::size_t t, std::size_t nt) {
          body::one_shot_phase<float, gs::op::avg_t>(data.data(), n, out[r].at(0), count, t, nt);
        });
        one[r].assign(out[r].at(0), out[r].at(0) + count);
      }
      for (std::size_t r = 0; r < n; ++r) {
        run_threads(50, [&](std::size_t t, std::size_t nt) {
          body::two_shot_reduce_phase<float, gs::op::avg_t>(data.data(), n, r, count, t, nt);
        });
      }
      for (std::size_t r = 0; r < n; ++r) {
        run_threads(50, [&](std::size_t t, std::size_t nt) {
          body::two_shot_gather_phase<float>(data.data(), n, out[r].at(0), count, t, nt);
        });
      }
      INFO("ranks " << n << " count " << count);
      for (std::size_t r = 0; r < n; ++r) {
        const std::vector<float> two(out[r].at(0), out[r].at(0) + count);
        CHECK(gs::testing::count_wrong(std::span<const float>(two), gs::reduce_op::avg, n) == 0);
        CHECK(gs::testing::count_wrong(std::span<const float>(one[r]), gs::reduce_op::avg, n) == 0);
        CHECK(same_bits(two, one[0]));
      }
    }
  }
  // Slices tile [0, count) with 16-byte-aligned starts.
  for (std::size_t count : {std::size_t{0}, std::size_t{3}, std::size_t{1000003}}) {
    std::size_t next = 0;
    for (std::size_t k = 0; k < 7; ++k) {
      const body::slice s = body::slice_of<gs::half>(count, 7, k);
      CHECK(s.offset == next);
      CHECK((s.offset % 8 == 0 || s.count == 0));
      next = s.offset + s.count;
    }
    CHECK(next == count);
  }
}

// The collectives' phases, chunked the way transport::cuda_ipc chunks them (a small
// staging half here, so that every call takes several chunks; odd sizes and an output
// that starts off the 16-byte grid), every rank's phase run in turn after all staged.
TEST_CASE("cuda_ipc broadcast, allgather and reduce_scatter phases: exact on every rank") {
  const std::size_t half = 96;  // staging bytes per rank and chunk
  for (std::size_t n = 2; n <= body::max_sources; n += 3) {
    INFO("ranks " << n);
    // broadcast of 1003 bytes from every root
    const std::size_t bytes = 1003;
    for (std::size_t root = 0; root < n; ++root) {
      std::vector<std::vector<unsigned char>> buf(n, std::vector<unsigned char>(bytes + 1));
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t i = 0; i < bytes; ++i) {
          buf[r][1 + i] = static_cast<unsigned char>(r == root ? i * 7 + 3 : 0xee);
        }
      }
      std::vector<unsigned char> staging(half);
      for (std::size_t off = 0; off < bytes; off += half) {
        const std::size_t len = std::min(half, bytes - off);
        std::memcpy(staging.data(), &buf[root][1 + off], len);
        for (std::size_t r = 0; r < n; ++r) {
          if (r == root) continue;
          run_threads(7, [&](std::size_t t, std::size_t nt) {
            body::broadcast_phase(staging.data(), &buf[r][1 + off], len, t, nt);
          });
        }
      }
      for (std::size_t r = 0; r < n; ++r) CHECK(buf[r] == buf[root]);
    }
    // allgather of 1003 bytes per rank
    std::vector<std::vector<unsigned char>> in(n, std::vector<unsigned char>(bytes)),
        out(n, std::vector<unsigned char>(n * bytes + 1, 0));
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < bytes; ++i) in[r][i] = static_cast<unsigned char>(r * 31 + i);
    }
    std::vector<std::vector<unsigned char>> stage(n, std::vector<unsigned char>(half));
    std::vector<const unsigned char*> sp(n);
    for (std::size_t off = 0; off < bytes; off += half) {
      const std::size_t len = std::min(half, bytes - off);
      for (std::size_t r = 0; r < n; ++r) {
        std::memcpy(stage[r].data(), in[r].data() + off, len);
        sp[r] = stage[r].data();
      }
      for (std::size_t r = 0; r < n; ++r) {
        run_threads(5, [&](std::size_t t, std::size_t nt) {
          body::allgather_phase(sp.data(), n, out[r].data() + 1, bytes, off, len, t, nt);
        });
      }
    }
    std::size_t bad = 0;
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t q = 0; q < n; ++q) {
        bad += std::memcmp(out[r].data() + 1 + q * bytes, in[q].data(), bytes) != 0;
      }
    }
    CHECK(bad == 0);
    // reduce_scatter (avg, float) of 1001 elements per rank
    const std::size_t count = 1001;
    const std::size_t chunk = body::scatter_chunk<float>(half * 4, n);
    REQUIRE(chunk > 0);
    std::vector<std::vector<float>> rin(n, std::vector<float>(n * count));
    std::vector<padded<float>> rout;
    std::vector<padded<float>> rst;
    for (std::size_t r = 0; r < n; ++r) {
      gs::testing::fill_inputs(std::span<float>(rin[r]), gs::reduce_op::avg, r, n);
      rout.emplace_back(count);
      rst.emplace_back(half);
    }
    std::vector<float*> rp(n);
    for (std::size_t off = 0; off < count; off += chunk) {
      const std::size_t len = std::min(chunk, count - off);
      const std::size_t stride = body::scatter_stride<float>(len);
      CHECK(n * stride * sizeof(float) <= half * 4);
      for (std::size_t r = 0; r < n; ++r) {
        rp[r] = rst[r].at(0);
        for (std::size_t p = 0; p < n; ++p) {
          std::memcpy(rp[r] + p * stride, rin[r].data() + p * count + off, len * sizeof(float));
        }
      }
      for (std::size_t r = 0; r < n; ++r) {
        run_threads(9, [&](std::size_t t, std::size_t nt) {
          body::reduce_scatter_phase<float, gs::op::avg_t>(rp.data(), n, r, stride,
                                                           rout[r].at(1) + off, len, t, nt);
        });
      }
    }
    for (std::size_t r = 0; r < n; ++r) {
      CHECK(gs::testing::count_wrong(std::span<const float>(rout[r].at(1), count),
                                     gs::reduce_op::avg, n, r * count) == 0);
    }
  }
}
