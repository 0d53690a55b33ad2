// SPDX-License-Identifier: Apache-2.0
// Fused, zero-copy, grouped and unfused-registered allreduces on in-process ranks:
// exact results, bitwise identical across ranks and across runs, ready() in random
// orders, plan mismatches named at registration.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/transport/shm.hpp>

#include "fusion_helpers.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using namespace fusion_test;
using local = gs::transport::local;

namespace {

// Registers the model in caller memory (packed) or in the arena (zero-copy), runs
// `steps` steps marking tensors in a per-rank random order, and checks every step.
template <class Fusion, class T, class Op>
void run_model(std::size_t ranks, Op op, std::size_t steps, std::vector<std::uint64_t>& digests,
               std::vector<std::size_t>& wrong) {
  const auto sizes = model_sizes();
  const auto first = firsts(sizes);
  digests.assign(ranks, 0);
  wrong.assign(ranks, 99);
  gs::transport::run_local(ranks, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, Fusion> ar(t);
    std::vector<std::vector<T>> own(sizes.size());
    std::vector<std::span<T>> ts;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if constexpr (gs::fusion::is_zero_copy_v<Fusion>) {
        CHECK(ar.template add<T>(sizes[i], "t" + std::to_string(i)) == i);
      } else {
        own[i].resize(sizes[i]);
        CHECK(ar.add(std::span<T>(own[i]), "t" + std::to_string(i)) == i);
      }
    }
    ar.commit(op);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if constexpr (gs::fusion::is_zero_copy_v<Fusion>) {
        ts.push_back(ar.template view<T>(i));
      } else {
        ts.push_back(std::span<T>(own[i]));
      }
    }
    std::size_t w = 0;
    for (std::size_t s = 0; s < steps; ++s) {
      fill_model(ts, Op::id, t.rank(), ranks, first);
      for (std::size_t i : shuffled(ts.size(), 1000 * s + t.rank())) ar.ready(i);
      ar.wait();
      w += wrong_model(ts, Op::id, ranks, first);
      const auto st = ar.last_stats();
      CHECK(st.tensors == sizes.size());
      CHECK(st.buckets == ar.plan().buckets.size());
      CHECK(st.bytes_in == ar.plan().payload_bytes);
      if (ranks > 1) CHECK(st.bytes_wire >= st.bytes_in * (ranks - 1) / ranks);
    }
    CHECK(ar.total_stats().calls == steps);
    wrong[t.rank()] = w;
    digests[t.rank()] = digest_model(ts);
  });
}

template <class Fusion, class T, class Op>
void check_model(Op op) {
  for (std::size_t ranks : {1, 2, 3, 4}) {
    CAPTURE(ranks);
    std::vector<std::uint64_t> d;
    std::vector<std::size_t> w;
    run_model<Fusion, T>(ranks, op, 2, d, w);
    CHECK(w == std::vector<std::size_t>(ranks, 0));
    for (std::size_t r = 1; r < ranks; ++r) CHECK(d[r] == d[0]);
  }
}

}  // namespace

TEST_CASE("bucket fusion: exact and identical on every rank, several types and ops") {
  gs::testbed::watchdog wd(120, "bucket fusion exact");
  check_model<gs::fusion::bucket<16 << 10>, float>(gs::op::sum);
  check_model<gs::fusion::bucket<16 << 10>, float>(gs::op::avg);
  check_model<gs::fusion::bucket<64 << 10>, double>(gs::op::max);
  check_model<gs::fusion::bucket<8 << 10>, gs::half>(gs::op::sum);
  check_model<gs::fusion::bucket<1 << 20>, std::int32_t>(gs::op::min);
  check_model<gs::fusion::bucket<4 << 10>, gs::bfloat16>(gs::op::prod);
}

TEST_CASE("zero-copy buckets: exact and identical on every rank") {
  gs::testbed::watchdog wd(120, "zero-copy exact");
  check_model<gs::fusion::zero_copy<16 << 10>, float>(gs::op::sum);
  check_model<gs::fusion::zero_copy<32 << 10>, double>(gs::op::avg);
  check_model<gs::fusion::zero_copy<8 << 10>, std::int64_t>(gs::op::max);
}

TEST_CASE("fusion::none with registered tensors: one async allreduce per tensor, exact") {
  gs::testbed::watchdog wd(120, "none registered exact");
  check_model<gs::fusion::none, float>(gs::op::sum);
}

TEST_CASE("grouped call: a list of spans fused in one go, exact, sync and async") {
  gs::testbed::watchdog wd(120, "grouped exact");
  const auto sizes = model_sizes();
  const auto first = firsts(sizes);
  for (std::size_t ranks : {1, 2, 3}) {
    CAPTURE(ranks);
    std::vector<std::size_t> wrong(ranks, 99);
    std::vector<std::uint64_t> dig(ranks, 0);
    gs::transport::run_local(ranks, [&](local& t) {
      gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<32 << 10>> ar(t);
      std::vector<std::vector<float>> own(sizes.size());
      std::vector<std::span<float>> ts;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        own[i].resize(sizes[i]);
        ts.push_back(std::span<float>(own[i]));
      }
      std::size_t w = 0;
      fill_model(ts, gs::reduce_op::sum, t.rank(), ranks, first);
      ar.allreduce(ts, gs::op::sum);
      w += wrong_model(ts, gs::reduce_op::sum, ranks, first);
      CHECK(ar.last_stats().tensors == sizes.size());
      CHECK(ar.last_stats().buckets < sizes.size());  // really fused
      fill_model(ts, gs::reduce_op::max, t.rank(), ranks, first);
      const std::vector<gs::tensor_ref> refs(ts.begin(), ts.end());
      auto h = ar.allreduce_async(std::span<const gs::tensor_ref>(refs), gs::op::max);
      h.wait();
      CHECK(h.test());
      w += wrong_model(ts, gs::reduce_op::max, ranks, first);
      wrong[t.rank()] = w;
      dig[t.rank()] = digest_model(ts);
    });
    CHECK(wrong == std::vector<std::size_t>(ranks, 0));
    for (std::size_t r = 1; r < ranks; ++r) CHECK(dig[r] == dig[0]);
  }
}

TEST_CASE("mixed element types in one model: one bucket per type, all exact") {
  gs::testbed::watchdog wd(60, "mixed types");
  std::vector<std::size_t> wrong(3, 99);
  gs::transport::run_local(3, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4 << 10>> ar(t);
    std::vector<float> f1(300), f2(700);
    std::vector<double> d1(500);
    std::vector<gs::half> h1(900);
    ar.add(std::span<float>(f1));
    ar.add(std::span<double>(d1));
    ar.add(std::span<gs::half>(h1));
    ar.add(std::span<float>(f2));
    ar.commit(gs::op::sum);
    std::size_t nf32 = 0;
    for (const auto& b : ar.plan().buckets) nf32 += b.type == gs::dtype::f32;
    CHECK(nf32 >= 1);
    gs::testing::fill_inputs(std::span<float>(f1), gs::reduce_op::sum, t.rank(), 3, 0);
    gs::testing::fill_inputs(std::span<double>(d1), gs::reduce_op::sum, t.rank(), 3, 300);
    gs::testing::fill_inputs(std::span<gs::half>(h1), gs::reduce_op::sum, t.rank(), 3, 800);
    gs::testing::fill_inputs(std::span<float>(f2), gs::reduce_op::sum, t.rank(), 3, 1700);
    auto h = ar.allreduce_async();
    h.wait();
    wrong[t.rank()] =
        gs::testing::count_wrong(std::span<const float>(f1), gs::reduce_op::sum, 3, 0) +
        gs::testing::count_wrong(std::span<const double>(d1), gs::reduce_op::sum, 3, 300) +
        gs::testing::count_wrong(std::span<const gs::half>(h1), gs::reduce_op::sum, 3, 800) +
        gs::testing::count_wrong(std::span<const float>(f2), gs::reduce_op::sum, 3, 1700);
  });
  CHECK(wrong == std::vector<std::size_t>(3, 0));
}

TEST_CASE("commit with element_types: the listed types run exactly, another one is named") {
  gs::testbed::watchdog wd(60, "element_types");
  std::vector<std::size_t> wrong(2, 99);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4 << 10>> ar(t);
    std::vector<float> f(1000);
    std::vector<std::int32_t> i(300);
    ar.add(std::span<float>(f), "w");
    ar.add(std::span<std::int32_t>(i), "n");
    ar.commit(gs::op::sum, gs::element_types<float, std::int32_t>{});
    gs::testing::fill_inputs(std::span<float>(f), gs::reduce_op::sum, t.rank(), 2, 0);
    gs::testing::fill_inputs(std::span<std::int32_t>(i), gs::reduce_op::sum, t.rank(), 2, 1000);
    ar.ready(1);
    ar.ready(0);
    ar.wait();
    wrong[t.rank()] =
        gs::testing::count_wrong(std::span<const float>(f), gs::reduce_op::sum, 2, 0) +
        gs::testing::count_wrong(std::span<const std::int32_t>(i), gs::reduce_op::sum, 2, 1000);
  });
  CHECK(wrong == std::vector<std::size_t>(2, 0));
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4 << 10>> ar(t);
    std::vector<float> f(10);
    std::vector<double> d(10);
    ar.add(std::span<float>(f), "w");
    ar.add(std::span<double>(d), "moments");
    CHECK_THROWS_WITH_AS(ar.commit(gs::op::avg, gs::element_types<float>{}),
                         doctest::Contains("tensor #1 ('moments') is float64 and commit() was "
                                           "given element_types without it"),
                         gs::error);
  });
}

namespace {
/// The ring without run_bytes: an algorithm that reduces typed.
struct typed_ring {
  static constexpr std::string_view name = "typed_ring";
  static constexpr gs::algorithm_traits traits{.generic = true};
  template <class Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op op, const gs::call_context& ctx) {
    gs::algo::ring::run(t, data, op, ctx);
  }
};
}  // namespace

TEST_CASE("an algorithm that runs on bytes gets the element type erased once, at commit") {
  namespace d = gs::detail;
  const auto types = gs::element_types<float, double, std::int32_t>{};
  // The ring on local: every type shares the runner's byte-level step, with its own ops.
  using ring_runner = d::bucket_runner<local, gs::algo::ring, gs::compress::none>;
  using ops_t = d::bucket_wire<local, gs::algo::ring>::ops_type<>;
  const auto ring = ring_runner::steps<gs::op::sum_t>(types);
  const auto& f32 = ring[static_cast<std::size_t>(gs::dtype::f32)];
  const auto& f64 = ring[static_cast<std::size_t>(gs::dtype::f64)];
  const auto& i32 = ring[static_cast<std::size_t>(gs::dtype::i32)];
  REQUIRE(f32);
  REQUIRE(f64);
  REQUIRE(i32);
  CHECK((f32.fn == f64.fn && f32.fn == i32.fn));
  const auto* o32 = static_cast<const ops_t*>(f32.ops);
  const auto* o64 = static_cast<const ops_t*>(f64.ops);
  REQUIRE(o32 != nullptr);
  REQUIRE(o64 != nullptr);
  CHECK(o32->type == gs::dtype::f32);
  CHECK(o32->elem == 4);
  CHECK(o64->type == gs::dtype::f64);
  CHECK(o64->elem == 8);
  CHECK(o64->id == gs::reduce_op::sum);
  CHECK(o32->host == nullptr);  // no peer memory on local: the host loops are not compiled
  CHECK_FALSE(ring[static_cast<std::size_t>(gs::dtype::bf16)]);  // not listed: not built
  // auto_select on shm: its direct algorithms run on bytes too, reducing with the type's
  // host loops, one table per (type, op).
  using shm_runner =
      d::bucket_runner<gs::transport::shm, gs::algo::auto_select, gs::compress::none>;
  using shm_ops_t = d::bucket_wire<gs::transport::shm, gs::algo::auto_select>::ops_type<>;
  const auto shm = shm_runner::steps<gs::op::avg_t>(types);
  const auto& s32 = shm[static_cast<std::size_t>(gs::dtype::f32)];
  const auto& s64 = shm[static_cast<std::size_t>(gs::dtype::f64)];
  REQUIRE(s32);
  REQUIRE(s64);
  CHECK((s32.fn == s64.fn));
  const auto* h32 = static_cast<const shm_ops_t*>(s32.ops);
  const auto* h64 = static_cast<const shm_ops_t*>(s64.ops);
  REQUIRE(h32 != nullptr);
  REQUIRE(h64 != nullptr);
  CHECK(h32->id == gs::reduce_op::avg);
  CHECK(h32->host == &gs::algo::detail::host_loops_v<float, gs::op::avg_t>);
  CHECK(h64->host == &gs::algo::detail::host_loops_v<double, gs::op::avg_t>);
  // A type a codec takes (float and double for the casts) keeps its typed step: the codec
  // reads its values. The others still go on bytes.
  using cast_runner = d::bucket_runner<local, gs::algo::ring, gs::compress::bf16>;
  const auto cast = cast_runner::steps<gs::op::sum_t>(types);
  CHECK(cast[static_cast<std::size_t>(gs::dtype::f32)].ops == nullptr);
  CHECK(cast[static_cast<std::size_t>(gs::dtype::f64)].ops == nullptr);
  CHECK(cast[static_cast<std::size_t>(gs::dtype::i32)].ops != nullptr);
  // An algorithm without run_bytes gets a typed step per type, and no ops.
  using typed_runner = d::bucket_runner<local, typed_ring, gs::compress::none>;
  const auto typed = typed_runner::steps<gs::op::sum_t>(types);
  CHECK_FALSE((typed[static_cast<std::size_t>(gs::dtype::f32)].fn ==
               typed[static_cast<std::size_t>(gs::dtype::f64)].fn));
  CHECK(typed[static_cast<std::size_t>(gs::dtype::f32)].ops == nullptr);
}

TEST_CASE("over levels, a hierarchical that runs on bytes across gets the type erased once") {
  namespace d = gs::detail;
  using two = gs::transport::two_level<local, local>;
  const auto types = gs::element_types<float, double>{};
  // hierarchical<ring>: one byte-level step for both types; the node level sums (avg
  // divides once, on the shard's owner) and the ring across the nodes sums too.
  using hier_runner = d::bucket_runner<two, gs::algo::hierarchical<>, gs::compress::none>;
  using hier_ops = d::bucket_wire<two, gs::algo::hierarchical<>>::ops_type<>;
  const auto hier = hier_runner::steps<gs::op::avg_t>(types);
  const auto& f32 = hier[static_cast<std::size_t>(gs::dtype::f32)];
  const auto& f64 = hier[static_cast<std::size_t>(gs::dtype::f64)];
  REQUIRE(f32);
  REQUIRE(f64);
  CHECK((f32.fn == f64.fn));
  const auto* o32 = static_cast<const hier_ops*>(f32.ops);
  const auto* o64 = static_cast<const hier_ops*>(f64.ops);
  REQUIRE(o32 != nullptr);
  REQUIRE(o64 != nullptr);
  CHECK(o32->level.elem == 4);
  CHECK(o64->level.elem == 8);
  CHECK(o32->level.id == gs::reduce_op::sum);
  CHECK(o32->final_op.id == gs::reduce_op::avg);
  CHECK(o32->final_op.type == gs::dtype::f32);
  CHECK(o32->inter.id == gs::reduce_op::sum);
  CHECK(o64->inter.type == gs::dtype::f64);
  // Three levels: the inner hierarchical's ops nest, summing at every level.
  using three = gs::transport::two_level<local, two>;
  using deep = gs::algo::hierarchical<gs::algo::hierarchical<>>;
  using deep_ops = d::bucket_wire<three, deep>::ops_type<>;
  const auto deep_steps =
      d::bucket_runner<three, deep, gs::compress::none>::steps<gs::op::avg_t>(types);
  const auto* n32 =
      static_cast<const deep_ops*>(deep_steps[static_cast<std::size_t>(gs::dtype::f32)].ops);
  REQUIRE(n32 != nullptr);
  CHECK(n32->final_op.id == gs::reduce_op::avg);
  CHECK(n32->inter.level.id == gs::reduce_op::sum);
  CHECK(n32->inter.final_op.id == gs::reduce_op::sum);
  CHECK(n32->inter.inter.elem == 4);
  // An inter-node algorithm without run_bytes keeps a typed step per type.
  using typed_hier = gs::algo::hierarchical<typed_ring>;
  const auto typed =
      d::bucket_runner<two, typed_hier, gs::compress::none>::steps<gs::op::sum_t>(types);
  CHECK(typed[static_cast<std::size_t>(gs::dtype::f32)].ops == nullptr);
  CHECK_FALSE((typed[static_cast<std::size_t>(gs::dtype::f32)].fn ==
               typed[static_cast<std::size_t>(gs::dtype::f64)].fn));
}

TEST_CASE("allreducer_options::bucket_bytes replaces the policy's cap at run time") {
  gs::testbed::watchdog wd(60, "bucket_bytes");
  std::vector<std::size_t> wrong(2, 99), buckets(2, 0), biggest(2, 0);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer_options o;
    o.bucket_bytes = 8 << 10;  // the policy says 1 MiB
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>> ar(t, o);
    std::vector<std::vector<float>> ts(10, std::vector<float>(1000));
    for (auto& v : ts) ar.add(std::span<float>(v));
    ar.commit(gs::op::sum);
    for (std::size_t i = 0; i < ts.size(); ++i)
      gs::testing::fill_inputs(std::span<float>(ts[i]), gs::reduce_op::sum, t.rank(), 2, 1000 * i);
    for (std::size_t i = ts.size(); i-- > 0;) ar.ready(i);
    ar.wait();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < ts.size(); ++i)
      bad +=
          gs::testing::count_wrong(std::span<const float>(ts[i]), gs::reduce_op::sum, 2, 1000 * i);
    wrong[t.rank()] = bad;
    buckets[t.rank()] = ar.plan().buckets.size();
    for (const auto& b : ar.plan().buckets)
      biggest[t.rank()] = std::max(biggest[t.rank()], b.bytes());
  });
  CHECK(wrong == std::vector<std::size_t>(2, 0));
  CHECK(buckets[0] == 5);  // 4000-byte tensors, two per 8 KiB bucket
  CHECK(biggest[0] == 8000);
  gs::transport::run_local(1, [&](local& t) {
    gs::allreducer_options o;
    o.bucket_bytes = 4096;
    using unfused = gs::allreducer<local, gs::algo::ring, gs::fusion::none>;
    CHECK_THROWS_WITH_AS(unfused(t, o), doctest::Contains("bucket_bytes = 4096 needs a fusing"),
                         gs::error);
  });
}

TEST_CASE("same plan, inexact inputs: bitwise identical across ranks and across runs") {
  gs::testbed::watchdog wd(120, "reproducible");
  const auto sizes = model_sizes();
  std::vector<std::uint64_t> runs;
  for (int run = 0; run < 3; ++run) {
    std::vector<std::uint64_t> dig(3, 0);
    gs::transport::run_local(3, [&](local& t) {
      gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<16 << 10>> ar(t);
      std::vector<std::vector<float>> own(sizes.size());
      std::vector<std::span<float>> ts;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        own[i].resize(sizes[i]);
        ts.push_back(std::span<float>(own[i]));
        ar.add(ts.back());
      }
      ar.commit(gs::op::avg);
      // Values whose sums round: the result depends on the reduction order.
      std::mt19937 g(1234 + static_cast<unsigned>(t.rank()));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (auto& s : ts)
        for (auto& x : s) x = u(g) / 3.0f;
      // A different ready() order on every rank and in every run.
      for (std::size_t i : shuffled(ts.size(), 77 * run + 5 * t.rank())) ar.ready(i);
      ar.wait();
      dig[t.rank()] = digest_model(ts);
    });
    CHECK(dig[1] == dig[0]);
    CHECK(dig[2] == dig[0]);
    runs.push_back(dig[0]);
  }
  CHECK(runs[1] == runs[0]);
  CHECK(runs[2] == runs[0]);
}

TEST_CASE("ready() in random orders, different per rank, over many steps: no deadlock") {
  gs::testbed::watchdog wd(120, "random ready orders");
  const std::size_t ranks = 4, steps = 12;
  std::vector<std::size_t> wrong(ranks, 99);
  std::vector<std::size_t> ntensors{1, 2, 5, 64};
  gs::transport::run_local(ranks, [&](local& t) {
    std::size_t w = 0;
    for (std::size_t nt : ntensors) {
      gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<2048>> ar(t);
      std::vector<std::vector<std::int32_t>> own(nt);
      std::vector<std::span<std::int32_t>> ts;
      std::vector<std::size_t> first(nt);
      for (std::size_t i = 0; i < nt; ++i) {
        own[i].resize(50 + 131 * i % 400);
        first[i] = 1000 * i;
        ts.push_back(std::span<std::int32_t>(own[i]));
        ar.add(ts.back());
      }
      ar.commit(gs::op::sum);
      std::mt19937 g(static_cast<unsigned>(99 * t.rank() + nt));
      for (std::size_t s = 0; s < steps; ++s) {
        fill_model(ts, gs::reduce_op::sum, t.rank(), ranks, first);
        auto order = shuffled(nt, g());
        // Sometimes mark only part and let wait() launch the rest.
        const std::size_t marked = s % 3 == 2 ? nt / 2 : nt;
        for (std::size_t k = 0; k < marked; ++k) {
          ar.ready(order[k]);
          if (g() % 4 == 0) std::this_thread::yield();
        }
        if (s % 2) {
          ar.wait();
        } else {
          ar.allreduce_async().wait();
        }
        w += wrong_model(ts, gs::reduce_op::sum, ranks, first);
      }
    }
    wrong[t.rank()] = w;
  });
  CHECK(wrong == std::vector<std::size_t>(ranks, 0));
}

TEST_CASE(
    "plan mismatch across ranks: errc::mismatch on every rank naming the first differing tensor") {
  gs::testbed::watchdog wd(60, "plan mismatch");
  std::mutex m;
  std::vector<std::string> msgs(3);
  std::vector<int> codes(3, 0);
  gs::transport::run_local(3, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4096>> ar(t);
    std::vector<std::vector<float>> own(8);
    for (std::size_t i = 0; i < 8; ++i) {
      own[i].resize(100 + i + (t.rank() == 2 && i == 5 ? 1 : 0));
      ar.add(std::span<float>(own[i]), "layer" + std::to_string(i) + ".weight");
    }
    try {
      ar.commit();
    } catch (const gs::error& e) {
      std::lock_guard lk(m);
      msgs[t.rank()] = e.what();
      codes[t.rank()] = static_cast<int>(e.code());
    }
  });
  for (std::size_t r = 0; r < 3; ++r) {
    CAPTURE(msgs[r]);
    CHECK(codes[r] == static_cast<int>(gs::errc::mismatch));
    CHECK(msgs[r].find("first differing tensor is #5") != std::string::npos);
    CHECK(msgs[r].find("rank 2 has count 106 float32") != std::string::npos);
    CHECK(msgs[r].find("rank 0 has count 105 float32") != std::string::npos);
    CHECK(msgs[r].find("rank " + std::to_string(r)) != std::string::npos);
    CHECK(msgs[r].find("'layer5.weight'") != std::string::npos);  // every rank names it
  }
}

TEST_CASE("plan mismatch: a rank with fewer tensors is named, and nobody hangs") {
  gs::testbed::watchdog wd(60, "plan mismatch length");
  std::vector<std::string> msgs(2);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::zero_copy<4096>> ar(t);
    const std::size_t n = t.rank() == 1 ? 3 : 4;
    for (std::size_t i = 0; i < n; ++i) ar.add<double>(10);
    try {
      ar.commit();
    } catch (const gs::error& e) {
      msgs[t.rank()] = e.what();
    }
  });
  for (const auto& m : msgs) {
    CAPTURE(m);
    CHECK(m.find("mismatch") != std::string::npos);
    CHECK(m.find("first differing tensor is #3") != std::string::npos);
    CHECK(m.find("rank 1 has no such tensor (3 registered)") != std::string::npos);
  }
}

TEST_CASE(
    "bad use is reported: avg on an integer tensor, ready twice, out of range, add after commit") {
  gs::testbed::watchdog wd(60, "bad use");
  gs::transport::run_local(1, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4096>> ar(t);
    std::vector<std::int32_t> a(10);
    std::vector<float> b(10);
    CHECK_THROWS_WITH_AS(ar.ready(0), doctest::Contains("commit()"), gs::error);
    ar.add(std::span<float>(b), "ok");
    ar.add(std::span<std::int32_t>(a), "counts");
    CHECK_THROWS_WITH_AS(ar.commit(gs::op::avg), doctest::Contains("tensor #1 ('counts') is int32"),
                         gs::error);
  });
  gs::transport::run_local(1, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4096>> ar(t);
    std::vector<float> b(10);
    ar.add(std::span<float>(b), "w");
    ar.commit();
    CHECK_THROWS_WITH_AS(ar.add(std::span<float>(b)), doctest::Contains("after commit()"),
                         gs::error);
    CHECK_THROWS_WITH_AS(ar.ready(1), doctest::Contains("out of range"), gs::error);
    std::vector<std::int32_t> x(4);
    const gs::tensor_ref bad(x.data(), 4, gs::dtype::i32);
    CHECK_THROWS_WITH_AS(ar.allreduce(std::span<const gs::tensor_ref>(&bad, 1), gs::op::avg),
                         doctest::Contains("op::avg needs a floating-point"), gs::error);
  });
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<64>> ar(t);
    std::vector<float> b(100), c(100);
    ar.add(std::span<float>(b), "w");
    ar.add(std::span<float>(c), "v");
    ar.commit();
    ar.ready(0);
    // Tensor 0 is alone in the last bucket, so its step is still being filled.
    CHECK_THROWS_WITH_AS(ar.ready(0), doctest::Contains("tensor #0 ('w') was marked ready twice"),
                         gs::error);
    ar.wait();
  });
}
