// SPDX-License-Identifier: Apache-2.0
// Fusion over the process transports: transport::mpi and transport::shm (bootstrapped
// from MPI), run by mpirun with the MPI test harness of tests/mpi. Fused, zero-copy and
// grouped results are exact and bitwise identical across ranks with ready() in a
// different random order on every rank; plan mismatches are named; errors on the
// progress thread reach wait().
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/algo/native.hpp>
#include <gradsync/transport/mpi.hpp>
#include <gradsync/algo/direct.hpp>
#include <gradsync/transport/shm/from_mpi.hpp>

#include "fusion_helpers.hpp"
#include "lossy_inputs.hpp"
#include "mpi_harness.hpp"

namespace gs = gradsync;
using namespace fusion_test;
using gs::testbed::contains;

namespace {

// Registers model_sizes() (in caller memory, or in the arena for zero-copy), runs two
// steps with per-rank random ready() orders, then one grouped call; checks every result.
template <class Tr, class A, class Fusion>
void model_steps(Tr& t, const char* what) {
  const auto sizes = model_sizes();
  const auto first = firsts(sizes);
  const std::size_t n = t.size();
  gs::allreducer<Tr, A, Fusion> ar(t);
  std::vector<std::vector<float>> own;
  std::vector<std::span<float>> ts = register_model<float>(ar, sizes, own, gs::op::sum);
  for (std::size_t s = 0; s < 2; ++s) {
    fill_model(ts, gs::reduce_op::sum, t.rank(), n, first);
    for (std::size_t i : shuffled(ts.size(), 31 * s + 7 * t.rank())) ar.ready(i);
    ar.wait();
    GS_CHECK_MSG(wrong_model(ts, gs::reduce_op::sum, n, first) == 0,
                 std::string(what) + ": step " + std::to_string(s) + " not exact");
    GS_CHECK_MSG(gs::testbed::same_on_all_ranks({digest_model(ts)}),
                 std::string(what) + ": ranks differ");
  }
  // Grouped call (always packed: the list is the caller's memory).
  std::vector<std::vector<float>> g(sizes.size());
  std::vector<std::span<float>> gl;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    g[i].resize(sizes[i]);
    gl.push_back(std::span<float>(g[i]));
  }
  fill_model(gl, gs::reduce_op::max, t.rank(), n, first);
  ar.allreduce(gl, gs::op::max);
  GS_CHECK_MSG(wrong_model(gl, gs::reduce_op::max, n, first) == 0,
               std::string(what) + ": grouped call not exact");
  GS_CHECK_MSG(gs::testbed::same_on_all_ranks({digest_model(gl)}),
               std::string(what) + ": grouped results differ");
}

// Small integers, exact in 16 bits (and summed exactly over a few ranks).
inline float cast_exact_value(std::size_t r, std::size_t i) {
  return static_cast<float>((i * 5 + r * 11) % 23 + 1);
}

// Compressed steps: inputs on which C is exact (cast_exact_value for fp16 / bf16,
// lossy_inputs.hpp for int8 and topk) summed exactly; results bitwise equal on every
// rank; the codec's passes in the statistics.
template <class Tr, class A, class Fusion, class C, class V>
void compressed_steps(Tr& t, const char* what, V value) {
  const std::vector<std::size_t> sizes = {5000, 1, 0, 40000, 333};
  const std::size_t n = t.size();
  gs::allreducer<Tr, A, Fusion, C> ar(t);
  std::vector<std::vector<float>> own;
  const std::vector<std::span<float>> ts = register_model<float>(ar, sizes, own, gs::op::sum);
  for (std::size_t s = 0; s < 2; ++s) {
    for (std::size_t k = 0; k < ts.size(); ++k) {
      for (std::size_t i = 0; i < ts[k].size(); ++i) ts[k][i] = value(t.rank(), i + 7 * k);
    }
    for (std::size_t i : shuffled(ts.size(), 13 * s + 3 * t.rank())) ar.ready(i);
    ar.wait();
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < ts.size(); ++k) {
      for (std::size_t i = 0; i < ts[k].size(); ++i) {
        float want = 0;
        for (std::size_t r = 0; r < n; ++r) want += value(r, i + 7 * k);
        wrong += ts[k][i] != want;
      }
    }
    GS_CHECK_MSG(wrong == 0, std::string(what) + ": step " + std::to_string(s) + ": " +
                                 std::to_string(wrong) + " wrong");
    GS_CHECK_MSG(gs::testbed::same_on_all_ranks({digest_model(ts)}),
                 std::string(what) + ": ranks differ");
  }
  const auto st = ar.last_stats();
  GS_CHECK_MSG(st.compression == C::name && st.compress_seconds > 0,
               std::string(what) + ": no conversion in the statistics");
}

// compress::exact: wide-range floats (exponents over 2^50 within a block, so the
// rounding of small values depends on each block's agreed exponent).
float wide_value(std::size_t r, std::size_t k, std::size_t i) {
  std::uint64_t z =
      r * 0x9e3779b97f4a7c15ull + i * 0x632be59bd9b4e019ull + k * 0xbf58476d1ce4e5b9ull;
  z ^= z >> 31;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 29;
  const float m = static_cast<float>((z >> 40) | (1u << 23)) / float(1u << 23);
  return std::ldexp((z & 1) ? -m : m, static_cast<int>((z >> 8) % 50) - 40);
}

// The exact sums over Tr with algorithm A and fusion F equal, bit for bit, the same sums
// by in-process threads (transport::local, ring, no fusion): the codes add the same
// integers whatever moves them.
template <class Tr, class A, class Fusion>
void exact_like_local(Tr& t, const char* what,
                      const std::vector<std::size_t>& sizes = {5000, 1, 0, 40000, 333, 70001}) {
  const std::size_t n = t.size(), me = t.rank();
  auto fill = [&](std::vector<std::span<float>>& ts, std::size_t r) {
    for (std::size_t k = 0; k < ts.size(); ++k)
      for (std::size_t i = 0; i < ts[k].size(); ++i) ts[k][i] = wide_value(r, k, i);
  };
  std::uint64_t want = 0;
  gs::transport::run_local(n, [&](gs::transport::local& lt) {
    gs::allreducer<gs::transport::local, gs::algo::ring, gs::fusion::none, gs::compress::exact<>>
        ar(lt);
    std::vector<std::vector<float>> own;
    auto ts = register_model<float>(ar, sizes, own, gs::op::sum);
    fill(ts, lt.rank());
    for (std::size_t k = 0; k < ts.size(); ++k) ar.ready(k);
    ar.wait();
    if (lt.rank() == me) want = digest_model(ts);
  });
  gs::allreducer<Tr, A, Fusion, gs::compress::exact<>> ar(t);
  std::vector<std::vector<float>> own;
  auto ts = register_model<float>(ar, sizes, own, gs::op::sum);
  fill(ts, me);
  for (std::size_t i : shuffled(ts.size(), 5 + me)) ar.ready(i);
  ar.wait();
  GS_CHECK_MSG(digest_model(ts) == want, std::string(what) + ": differs from the local run");
  GS_CHECK_MSG(gs::testbed::same_on_all_ranks({digest_model(ts)}),
               std::string(what) + ": ranks differ");
}

}  // namespace

// The codecs' arithmetic does not depend on the MPI library: a build against a second
// MPI (GS_MPI_TRANSPORT_ONLY, tests/meson.build) leaves these cases to the first one.
#if !GS_MPI_TRANSPORT_ONLY
GS_MPI_TEST("fusion compression: fp16 and bf16 over mpi and shm, exact and equal", 120) {
  {
    gs::transport::mpi t{MPI_COMM_WORLD};
    compressed_steps<gs::transport::mpi, gs::algo::ring, gs::fusion::bucket<16 << 10>,
                     gs::compress::fp16>(t, "mpi ring bucket fp16", cast_exact_value);
    compressed_steps<gs::transport::mpi, gs::algo::native, gs::fusion::zero_copy<32 << 10>,
                     gs::compress::bf16>(t, "mpi native zero-copy bf16", cast_exact_value);
  }
  gs::transport::shm_options base;
  base.heap_bytes = 4 << 20;
  gs::transport::shm t(gs::transport::shm_options_from_mpi(MPI_COMM_WORLD, base));
  compressed_steps<gs::transport::shm, gs::algo::direct_two_shot, gs::fusion::bucket<64 << 10>,
                   gs::compress::fp16>(t, "shm heap two-shot bucket fp16", cast_exact_value);
  compressed_steps<gs::transport::shm, gs::algo::auto_select, gs::fusion::zero_copy<1 << 20>,
                   gs::compress::bf16>(t, "shm heap auto zero-copy bf16", cast_exact_value);
}

// PowerSGD rank 3 on a rank-3 sum: every rank's matrix is A_r B with B shared, so the sum
// (sum_r A_r) B has rank 3 and comes back to float tolerance; the bias in the same bucket
// exactly; every rank the same bits.
template <class Tr, class A, class C>
void powersgd_steps(Tr& t, const char* what) {
  constexpr std::size_t m = 64, k = 48, r = 3;
  const std::size_t n = t.size();
  auto a = [](std::size_t q, std::size_t i, std::size_t c) {
    return static_cast<float>((i * 7 + c * 3 + q * 5) % 11) / 11.0f - 0.5f;
  };
  auto b = [](std::size_t c, std::size_t j) {
    return static_cast<float>((c * 13 + j * 5) % 17) / 17.0f - 0.5f;
  };
  auto mat = [&](std::size_t q, std::size_t i, std::size_t j) {
    float s = 0;
    for (std::size_t c = 0; c < r; ++c) s += a(q, i, c) * b(c, j);
    return s;
  };
  gs::allreducer<Tr, A, gs::fusion::bucket<1 << 20>, C> ar(t);
  std::vector<float> w(m * k), v(k);
  ar.add(std::span<float>(w), "W", gs::matrix_shape{m, k});
  ar.add(std::span<float>(v), "b");
  ar.commit(gs::op::sum);
  for (int step = 0; step < 2; ++step) {
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < k; ++j) w[i * k + j] = mat(t.rank(), i, j);
    for (std::size_t j = 0; j < k; ++j) v[j] = static_cast<float>(j + t.rank());
    ar.ready(1);
    ar.ready(0);
    ar.wait();
  }
  double err = 0, norm = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < k; ++j) {
      float want = 0;
      for (std::size_t q = 0; q < n; ++q) want += mat(q, i, j);
      err = std::max(err, double(std::fabs(w[i * k + j] - want)));
      norm = std::max(norm, double(std::fabs(want)));
    }
  }
  for (std::size_t j = 0; j < k; ++j) {
    bad += v[j] != static_cast<float>(n * j + n * (n - 1) / 2);
  }
  GS_CHECK_MSG(err <= 1e-4 * norm, std::string(what) + ": error " + std::to_string(err) +
                                       " against max " + std::to_string(norm));
  GS_CHECK_MSG(bad == 0, std::string(what) + ": the bias is not exact");
  GS_CHECK_MSG(
      gs::testbed::same_on_all_ranks({gs::testing::fnv1a64(w.data(), w.size() * sizeof(float)),
                                      gs::testing::fnv1a64(v.data(), v.size() * sizeof(float))}),
      std::string(what) + ": ranks differ");
}

GS_MPI_TEST("fusion compression: int8 and topk (with error feedback) over mpi and shm", 120) {
  namespace c = gs::compress;
  const std::size_t n = static_cast<std::size_t>(gs::testbed::world_size());
  auto int8_value = [n](std::size_t r, std::size_t i) { return int8_exact_value(r, i, n); };
  {
    gs::transport::mpi t{MPI_COMM_WORLD};
    compressed_steps<gs::transport::mpi, gs::algo::ring, gs::fusion::bucket<16 << 10>, c::int8<>>(
        t, "mpi ring bucket int8", int8_value);
    compressed_steps<gs::transport::mpi, gs::algo::native, gs::fusion::bucket<64 << 10>,
                     c::error_feedback<c::int8<64>>>(t, "mpi native bucket ef_int8", int8_value);
    compressed_steps<gs::transport::mpi, gs::algo::native, gs::fusion::bucket<64 << 10>,
                     c::topk<10>>(t, "mpi native bucket topk", sparse_value);
    compressed_steps<gs::transport::mpi, gs::algo::ring, gs::fusion::zero_copy<32 << 10>,
                     c::error_feedback<c::topk<10>>>(t, "mpi ring zero-copy ef_topk", sparse_value);
  }
  gs::transport::shm_options base;
  base.heap_bytes = 4 << 20;
  gs::transport::shm t(gs::transport::shm_options_from_mpi(MPI_COMM_WORLD, base));
  compressed_steps<gs::transport::shm, gs::algo::direct_two_shot, gs::fusion::bucket<64 << 10>,
                   c::int8<>>(t, "shm heap two-shot bucket int8", int8_value);
  compressed_steps<gs::transport::shm, gs::algo::auto_select, gs::fusion::bucket<64 << 10>,
                   c::error_feedback<c::topk<10>>>(t, "shm heap auto bucket ef_topk", sparse_value);
  powersgd_steps<gs::transport::shm, gs::algo::direct_two_shot, c::powersgd<3>>(
      t, "shm heap two-shot powersgd");
  gs::transport::mpi tm{MPI_COMM_WORLD};
  powersgd_steps<gs::transport::mpi, gs::algo::ring, c::error_feedback<c::powersgd<3>>>(
      tm, "mpi ring ef_powersgd");
}

GS_MPI_TEST("fusion compression: exact sums over mpi and shm equal local threads' bits", 120) {
  const std::vector<std::size_t> big_model = {5000, 1, 0, 2100000, 333, 70001};
  {
    gs::transport::mpi t{MPI_COMM_WORLD};
    exact_like_local<gs::transport::mpi, gs::algo::ring, gs::fusion::bucket<64 << 10>>(
        t, "mpi ring bucket exact");
    exact_like_local<gs::transport::mpi, gs::algo::native, gs::fusion::zero_copy<1 << 20>>(
        t, "mpi native zero-copy exact");
    // 16.6 MiB of codes in one bucket: two pieces (compress/pieces.hpp), in turn on one
    // host; tests/cluster sums them across hosts, on the codec's helper thread.
    exact_like_local<gs::transport::mpi, gs::algo::ring, gs::fusion::bucket<25 << 20>>(
        t, "mpi ring exact in pieces", big_model);
  }
  gs::transport::shm_options base;
  base.heap_bytes = 8 << 20;
  gs::transport::shm t(gs::transport::shm_options_from_mpi(MPI_COMM_WORLD, base));
  exact_like_local<gs::transport::shm, gs::algo::direct_one_shot, gs::fusion::bucket<64 << 10>>(
      t, "shm direct_one_shot bucket exact");
  exact_like_local<gs::transport::shm, gs::algo::direct_two_shot, gs::fusion::none>(
      t, "shm direct_two_shot exact");
  exact_like_local<gs::transport::shm, gs::algo::auto_select, gs::fusion::bucket<1 << 20>>(
      t, "shm auto bucket exact");
  exact_like_local<gs::transport::shm, gs::algo::auto_select, gs::fusion::bucket<25 << 20>>(
      t, "shm auto exact in pieces", big_model);
}
#endif  // !GS_MPI_TRANSPORT_ONLY

GS_MPI_TEST("fusion mpi: bucket, zero-copy and grouped, ring and native", 120) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  model_steps<gs::transport::mpi, gs::algo::ring, gs::fusion::bucket<16 << 10>>(t,
                                                                                "mpi ring bucket");
  model_steps<gs::transport::mpi, gs::algo::native, gs::fusion::bucket<16 << 10>>(
      t, "mpi native bucket");
  model_steps<gs::transport::mpi, gs::algo::auto_select, gs::fusion::zero_copy<32 << 10>>(
      t, "mpi auto zero-copy");
  model_steps<gs::transport::mpi, gs::algo::ring, gs::fusion::none>(t, "mpi ring none");
}

GS_MPI_TEST("fusion shm: bucket, zero-copy and grouped, ring and auto (direct)", 120) {
  auto t = gs::transport::shm_from_mpi(MPI_COMM_WORLD);
  model_steps<gs::transport::shm, gs::algo::ring, gs::fusion::bucket<16 << 10>>(t,
                                                                                "shm ring bucket");
  model_steps<gs::transport::shm, gs::algo::auto_select, gs::fusion::bucket<64 << 10>>(
      t, "shm auto bucket");
  model_steps<gs::transport::shm, gs::algo::auto_select, gs::fusion::zero_copy<32 << 10>>(
      t, "shm auto zero-copy");
}

GS_MPI_TEST("fusion shm with a heap: arenas placed there, peers read buckets in place", 120) {
  gs::transport::shm_options base;
  base.heap_bytes = 8 << 20;
  gs::transport::shm t(gs::transport::shm_options_from_mpi(MPI_COMM_WORLD, base));
  model_steps<gs::transport::shm, gs::algo::direct_two_shot, gs::fusion::bucket<64 << 10>>(
      t, "shm heap two-shot bucket");
  model_steps<gs::transport::shm, gs::algo::direct_two_shot, gs::fusion::zero_copy<32 << 10>>(
      t, "shm heap two-shot zero-copy");
  model_steps<gs::transport::shm, gs::algo::auto_select, gs::fusion::zero_copy<1 << 20>>(
      t, "shm heap auto zero-copy");
  // The zero-copy arena is in this rank's heap (registered), and released with its
  // allreducer: the whole heap is free again afterwards.
  {
    gs::allreducer<gs::transport::shm, gs::algo::direct_two_shot, gs::fusion::zero_copy<1 << 20>>
        ar(t);
    ar.add<float>(1000);
    ar.add<float>(3000);
    ar.commit(gs::op::sum);
    const auto v = ar.view<float>(1);
    GS_CHECK_MSG(
        t.registered_offset(v.data(), v.size() * sizeof(float)) != gs::transport::shm::npos,
        "zero-copy arena is not in the shm heap");
  }
  auto whole = t.allocate<std::byte>(8 << 20);
  GS_CHECK_MSG(whole.size() == (8u << 20), "heap not fully released by the allreducers");
}

GS_MPI_TEST("fusion shm with a heap too small: arenas fall back to private memory", 60) {
  gs::transport::shm_options base;
  base.heap_bytes = 4096;
  gs::transport::shm t(gs::transport::shm_options_from_mpi(MPI_COMM_WORLD, base));
  model_steps<gs::transport::shm, gs::algo::direct_two_shot, gs::fusion::zero_copy<32 << 10>>(
      t, "shm small-heap two-shot zero-copy");
  gs::allreducer<gs::transport::shm, gs::algo::direct_two_shot, gs::fusion::zero_copy<1 << 20>> ar(
      t);
  ar.add<float>(100000);
  ar.commit(gs::op::sum);
  const auto v = ar.view<float>(0);
  GS_CHECK_MSG(t.registered_offset(v.data(), v.size() * sizeof(float)) == gs::transport::shm::npos,
               "a 400 KB arena cannot be in a 4 KiB heap");
}

GS_MPI_TEST("fusion mpi: a plan mismatch names the first differing tensor on every rank", 60) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  gs::allreducer<gs::transport::mpi, gs::algo::ring, gs::fusion::bucket<4096>> ar(t);
  std::vector<std::vector<double>> own(6);
  for (std::size_t i = 0; i < own.size(); ++i) {
    own[i].resize(50 + (t.rank() == t.size() - 1 && i == 4 ? 1 : 0));
    ar.add(std::span<double>(own[i]), "w" + std::to_string(i));
  }
  const std::string m = GS_CHECK_ERROR(ar.commit(), gs::errc::mismatch);
  GS_CHECK_MSG(contains(m, "first differing tensor is #4"), m);
  GS_CHECK_MSG(contains(m, "rank " + std::to_string(t.size() - 1) + " has count 51 float64"), m);
}

GS_MPI_TEST("fusion mpi and shm: a mismatch on the progress thread surfaces at wait()", 60) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  auto s = gs::transport::shm_from_mpi(MPI_COMM_WORLD);
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  {
    gs::allreducer<gs::transport::mpi, gs::algo::ring> ar(t);
    std::vector<float> v(t.rank() == 0 ? 100 : 99);
    auto h = ar.allreduce_async(std::span<float>(v), gs::op::sum);
    const std::string m = GS_CHECK_ERROR(h.wait(), gs::errc::mismatch);
    GS_CHECK_MSG(contains(m, "count 100 vs 99"), m);
  }
  {
    gs::allreducer<gs::transport::shm, gs::algo::ring> ar(s);
    std::vector<float> v(t.rank() == 0 ? 100 : 99);
    auto h = ar.allreduce_async(std::span<float>(v), gs::op::sum);
    const std::string m = GS_CHECK_ERROR(h.wait(), gs::errc::mismatch);
    GS_CHECK_MSG(contains(m, "count 100 vs 99"), m);
  }
}
