// SPDX-License-Identifier: Apache-2.0
// The allreducer over a transport::two_level<local, local> with algo::hierarchical:
// threads as ranks, placed in nodes. Bucket, zero-copy, grouped and compressed calls are
// exact and identical on every rank; ready() in random orders; the plan check names the
// first differing tensor with global ranks and fails every node at once; the timeline
// shows each bucket's three phases.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/algo/tree.hpp>
#include <gradsync/allreducer.hpp>
#include <gradsync/gradsync.hpp>

#include "fusion_helpers.hpp"
#include "lossy_inputs.hpp"
#include "json_check.hpp"
#include "two_level_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using gs::transport::local;
using two_level = gs::transport::two_level<local, local>;
using namespace fusion_test;

namespace {

/// 20 s deadline: a rank left waiting fails the case quickly.
gs::allreducer_options short_options() {
  gs::allreducer_options o;
  o.call.timeout = gs::seconds_d(20);
  return o;
}

/// Registers the toy model, runs `steps` steps with ready() in a per-rank random order,
/// checks exact results; returns the per-step digests (compared across ranks).
template <class Algo, class Fusion, class T, class Op>
void check_model(std::size_t nodes, std::size_t per_node, Op op, std::size_t steps = 2) {
  const auto sizes = model_sizes();
  const auto first = firsts(sizes);
  const std::size_t n = nodes * per_node;
  std::vector<std::vector<std::uint64_t>> digests(n);
  std::vector<std::size_t> wrong(n);
  std::vector<std::string> summaries(n);
  const auto errors = gs::testbed::run_two_level_shape(nodes, per_node, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    const std::size_t r = t.rank();
    gs::allreducer<two_level, Algo, Fusion> ar(t, short_options());
    std::vector<std::vector<T>> own;
    auto ts = register_model<T>(ar, sizes, own, op);
    for (std::size_t s = 0; s < steps; ++s) {
      fill_model(ts, Op::id, r, n, first);
      for (std::size_t i : shuffled(ts.size(), 1000 * s + r)) ar.ready(i);
      ar.wait();
      wrong[r] += wrong_model(ts, Op::id, n, first);
      digests[r].push_back(digest_model(ts));
    }
    summaries[r] = ar.summary();
  });
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(wrong[r] == 0);
    CHECK(digests[r].size() == steps);
    CHECK(digests[r] == digests[0]);
    CHECK(summaries[r].find("hierarchical") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("allreducer over two levels: bucket fusion exact and identical, several shapes") {
  gs::testbed::watchdog wd(240, "two-level bucket fusion");
  using hier = gs::algo::hierarchical<>;
  check_model<hier, gs::fusion::bucket<16 << 10>, float>(2, 2, gs::op::sum);
  check_model<hier, gs::fusion::bucket<16 << 10>, float>(3, 2, gs::op::avg);
  check_model<hier, gs::fusion::bucket<8 << 10>, double>(2, 3, gs::op::max);
  check_model<hier, gs::fusion::bucket<4 << 10>, gs::half>(1, 3, gs::op::sum);
  check_model<hier, gs::fusion::bucket<64 << 10>, std::int32_t>(3, 1, gs::op::min);
  check_model<gs::algo::hierarchical<gs::algo::tree>, gs::fusion::bucket<16 << 10>, gs::bfloat16>(
      2, 2, gs::op::prod);
}

TEST_CASE("allreducer over two levels: zero-copy buckets and fusion::none, exact") {
  gs::testbed::watchdog wd(240, "two-level zero-copy");
  using hier = gs::algo::hierarchical<>;
  check_model<hier, gs::fusion::zero_copy<16 << 10>, float>(2, 2, gs::op::sum);
  check_model<hier, gs::fusion::zero_copy<32 << 10>, double>(2, 3, gs::op::avg);
  check_model<hier, gs::fusion::none, float>(2, 2, gs::op::sum, 1);
}

TEST_CASE("allreducer over two levels: grouped, async and bf16-compressed calls") {
  gs::testbed::watchdog wd(120, "two-level grouped");
  const std::size_t n = 6;
  std::mutex m;
  std::vector<std::uint64_t> digests;
  std::vector<std::size_t> wrong(n);
  std::vector<std::vector<float>> compressed(n);
  const auto errors = gs::testbed::run_two_level_shape(3, 2, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    const std::size_t r = t.rank();
    gs::allreducer<two_level, gs::algo::hierarchical<>, gs::fusion::bucket<8 << 10>> ar(
        t, short_options());
    std::vector<float> x(3001), y(17), z(40000);
    std::vector<std::span<float>> list{std::span<float>(x), std::span<float>(y),
                                       std::span<float>(z)};
    const auto first = firsts({x.size(), y.size(), z.size()});
    fill_model(list, gs::reduce_op::sum, r, n, first);
    ar.allreduce(list, gs::op::sum);
    wrong[r] += wrong_model(list, gs::reduce_op::sum, n, first);
    fill_model(list, gs::reduce_op::max, r, n, first);
    const std::vector<gs::tensor_ref> refs(list.begin(), list.end());
    auto h = ar.allreduce_async(std::span<const gs::tensor_ref>(refs), gs::op::max);
    h.wait();
    wrong[r] += wrong_model(list, gs::reduce_op::max, n, first);
    // bf16 on the wire: small integers are exact in bfloat16, so the sum is exact too.
    gs::allreducer<two_level, gs::algo::hierarchical<>, gs::fusion::bucket<8 << 10>,
                   gs::compress::bf16>
        cr(t, short_options());
    std::vector<float> g(5000);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i + r) % 7);
    cr.allreduce(std::span<float>(g), gs::op::sum);
    std::lock_guard lk(m);
    digests.push_back(digest_model(list));
    compressed[r] = g;
  });
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(wrong[r] == 0);
    CHECK(digests.at(r) == digests[0]);
    bool exact = true;
    for (std::size_t i = 0; i < 5000; ++i) {
      float want = 0;
      for (std::size_t q = 0; q < n; ++q) want += static_cast<float>((i + q) % 7);
      exact = exact && compressed[r][i] == want;
    }
    CHECK(exact);
  }
}

// A bucketed step with codec C over 3 nodes x 2: exact inputs for C, exact sums, every
// rank the same bits; topk's allgather crosses both levels.
template <class C, class V>
void lossy_two_level(const char* what, V value) {
  CAPTURE(what);
  const std::size_t n = 6;
  std::mutex m;
  std::vector<std::vector<float>> got(n);
  const auto errors = gs::testbed::run_two_level_shape(3, 2, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    gs::allreducer<two_level, gs::algo::hierarchical<>, gs::fusion::bucket<16 << 10>, C> ar(
        t, short_options());
    std::vector<float> x(3001), y(17), z(40000);
    ar.add(std::span<float>(x));
    ar.add(std::span<float>(y));
    ar.add(std::span<float>(z));
    ar.commit(gs::op::sum);
    std::vector<float> all;
    for (int step = 0; step < 2; ++step) {
      for (auto* v : {&x, &y, &z}) {
        for (std::size_t i = 0; i < v->size(); ++i) (*v)[i] = value(t.rank(), i);
      }
      for (std::size_t k = 3; k-- > 0;) ar.ready(k);
      ar.wait();
    }
    for (auto* v : {&x, &y, &z}) all.insert(all.end(), v->begin(), v->end());
    std::lock_guard lk(m);
    got[t.rank()] = all;
  });
  std::size_t wrong = 0;
  std::size_t pos = 0;
  for (std::size_t len : {3001u, 17u, 40000u}) {
    for (std::size_t i = 0; i < len; ++i, ++pos) {
      float want = 0;
      for (std::size_t q = 0; q < n; ++q) want += value(q, i);
      wrong += got[0][pos] != want;
    }
  }
  CHECK(wrong == 0);
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(got[r] == got[0]);
  }
}

TEST_CASE("allreducer over two levels: int8 and topk, with and without error feedback") {
  gs::testbed::watchdog wd(120, "two-level lossy");
  namespace c = gs::compress;
  auto int8_value = [](std::size_t r, std::size_t i) { return int8_exact_value(r, i, 6); };
  lossy_two_level<c::int8<>>("int8", int8_value);
  lossy_two_level<c::error_feedback<c::int8<>>>("ef_int8", int8_value);
  lossy_two_level<c::topk<10>>("topk", sparse_value);
  lossy_two_level<c::error_feedback<c::topk<10>>>("ef_topk", sparse_value);
}

TEST_CASE("allreducer over two levels: a plan mismatch inside one node fails every rank") {
  gs::testbed::watchdog wd(60, "two-level plan mismatch");
  // 2 nodes x 2; global rank 3 (node 1, local index 1) registers a shorter tensor #2.
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [](local a, local b) {
    two_level t(std::move(a), std::move(b));
    gs::allreducer<two_level, gs::algo::hierarchical<>, gs::fusion::bucket<4096>> ar(
        t, short_options());
    std::vector<float> t0(10), t1(20), t2(t.rank() == 3 ? 29 : 30);
    ar.add(std::span<float>(t0), "w0");
    ar.add(std::span<float>(t1), "w1");
    ar.add(std::span<float>(t2), "w2");
    ar.commit();
  });
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CAPTURE(errors[r]);
    if (r >= 2) {  // node 1 names the tensor and the global ranks
      CHECK(errors[r].find("first differing tensor is #2") != std::string::npos);
      CHECK(errors[r].find("rank 3 has count 29 float32") != std::string::npos);
      CHECK(errors[r].find("rank 2 has count 30 float32") != std::string::npos);
    } else {  // node 0 is told at once that another node disagrees
      CHECK(errors[r].find("another node differ among themselves") != std::string::npos);
    }
  }
}

TEST_CASE("allreducer over two levels: nodes that disagree with each other are named") {
  gs::testbed::watchdog wd(60, "two-level plan mismatch across nodes");
  // 2 nodes x 2; node 1 registers one tensor more than node 0: every rank names it.
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [](local a, local b) {
    two_level t(std::move(a), std::move(b));
    gs::allreducer<two_level, gs::algo::hierarchical<>, gs::fusion::bucket<4096>> ar(
        t, short_options());
    std::vector<float> t0(10), t1(20);
    ar.add(std::span<float>(t0));
    if (t.inter().rank() == 1) ar.add(std::span<float>(t1));
    ar.commit();
  });
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CAPTURE(errors[r]);
    CHECK(errors[r].find("first differing tensor is #1") != std::string::npos);
    // Inter group of local index l: global ranks l (node 0) and 2 + l (node 1).
    CHECK(errors[r].find("rank " + std::to_string(2 + r % 2) + " has count 20 float32") !=
          std::string::npos);
    CHECK(errors[r].find("rank " + std::to_string(r % 2) + " has no such tensor") !=
          std::string::npos);
  }
}

TEST_CASE("allreducer over two levels: wire bytes are the bytes both levels sent") {
  gs::testbed::watchdog wd(60, "two-level wire bytes");
  // 3 nodes x 2 ranks, 6000 floats, ring at both levels. Inside the node each rank sends
  // its half in both phases (2 x 3000 floats) and one 48-byte header; across the 3 nodes
  // its 3000-float shard moves as 2 + 2 chunks of 1000 floats, plus 2 headers (Bruck).
  const std::size_t n = 6, count = 6000;
  const std::size_t want = (2 * 3000 + 4 * 1000) * sizeof(float) + 3 * sizeof(gs::call_header);
  std::vector<gs::observe::call_stats> stats(n);
  std::vector<std::size_t> wrong(n);
  const auto errors = gs::testbed::run_two_level_shape(3, 2, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    const std::size_t r = t.rank();
    gs::allreducer<two_level, gs::algo::hierarchical<>> ar(t, short_options());
    std::vector<float> x(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<float>((i + r) % 5);
    ar.allreduce(std::span<float>(x), gs::op::sum);
    for (std::size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (std::size_t q = 0; q < n; ++q) sum += static_cast<float>((i + q) % 5);
      wrong[r] += x[i] != sum;
    }
    stats[r] = ar.last_stats();
  });
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(wrong[r] == 0);
    CHECK(stats[r].wire_measured);
    CHECK(stats[r].bytes_in == count * sizeof(float));
    CHECK(stats[r].bytes_wire == want);
  }
}

TEST_CASE("allreducer over two levels: the timeline shows each bucket's three phases") {
  gs::testbed::watchdog wd(60, "two-level timeline");
  const char* dir = std::getenv("TMPDIR");
  const std::string base = std::string(dir && *dir ? dir : "/tmp") + "/gradsync_two_level_" +
                           std::to_string(::getpid()) + ".json";
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    gs::allreducer_options o = short_options();
    o.timeline = base;
    gs::allreducer<two_level, gs::algo::hierarchical<>, gs::fusion::bucket<8 << 10>> ar(t, o);
    std::vector<std::vector<float>> own;
    auto ts = register_model<float>(ar, {3000, 3000, 10}, own, gs::op::sum);
    for (std::size_t i = 0; i < ts.size(); ++i) ar.ready(i);
    ar.wait();
  });
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    const std::string f = gs::observe::timeline::path_for(base, r);
    const std::string text = gs::testbed::read_file(f);
    REQUIRE(!text.empty());
    CHECK(gs::testbed::json_checker(text).valid());
    const auto names = gs::testbed::event_names(text);
    for (const char* want :
         {"allreduce", "intra_reduce_scatter", "inter_allreduce", "intra_allgather"}) {
      CAPTURE(want);
      CHECK(names.count(want) == 1);
    }
    std::remove(f.c_str());
  }
}
