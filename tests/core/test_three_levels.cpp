// SPDX-License-Identifier: Apache-2.0
// Three levels, composed by nesting: transport::two_level<local, two_level<local, local>>
// with algo::hierarchical<algo::hierarchical<...>>, threads as ranks (think: the threads
// of a process, the processes of a host, the hosts). Nothing in the allreducer, the entry
// points or the composition table knows about a third level; these tests show the
// recursion gives exact, bitwise-identical results through the free allreduce and the
// allreducer, and that the call checks (argument agreement, the non-finite check,
// verify) reach every rank of every level.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/algo/tree.hpp>
#include <gradsync/allreducer.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/local/group.hpp>

#include "watchdog.hpp"

namespace gs = gradsync;
using gs::transport::local;
using inner = gs::transport::two_level<local, local>;
using three = gs::transport::two_level<local, inner>;
using hier2 = gs::algo::hierarchical<gs::algo::hierarchical<>>;

namespace {

/// Runs body(three&) on s1 x s2 x s3 threads: rank = (c * s2 + b) * s1 + a, where a is
/// the index in the innermost group (s1 ranks), b in the middle one, c in the outer one.
/// Returns each rank's error message ("" when it succeeded).
template <class Body>
std::vector<std::string> run_three(std::size_t s1, std::size_t s2, std::size_t s3, Body&& body) {
  using group = gs::transport::detail::local_group;
  const std::size_t n = s1 * s2 * s3;
  // Level 1 groups by (c, b), level 2 by (c, a), level 3 by (b, a).
  std::vector<std::shared_ptr<group>> g1(s3 * s2), g2(s3 * s1), g3(s2 * s1);
  for (auto& g : g1) g = std::make_shared<group>(s1);
  for (auto& g : g2) g = std::make_shared<group>(s2);
  for (auto& g : g3) g = std::make_shared<group>(s3);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const std::size_t a = r % s1, b = (r / s1) % s2, c = r / (s1 * s2);
      try {
        three t(local(g1[c * s2 + b], a),
                inner(local(g2[c * s1 + a], b), local(g3[b * s1 + a], c)));
        body(t);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty message)";
      }
      g1[c * s2 + b]->leave(a);
      g2[c * s1 + a]->leave(b);
      g3[b * s1 + a]->leave(c);
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

gs::call_options deadline_20s() {
  gs::call_options o;
  o.timeout = gs::seconds_d(20);
  return o;
}

struct three_outcome {
  std::mutex m;
  std::vector<std::vector<std::uint64_t>> hashes;  // [rank][case]
  std::vector<std::size_t> wrong, seen;            // [rank]
  explicit three_outcome(std::size_t n) : hashes(n), wrong(n), seen(n) {}
};

template <class A, class T, class Op>
void cases(three& t, three_outcome& o, const gs::call_options& opt) {
  const std::size_t n = t.size(), r = t.rank();
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4099}, std::size_t{70001}}) {
    std::vector<T> v(count);
    gs::testing::fill_inputs(std::span<T>(v), Op::id, r, n);
    gs::allreduce<A>(t, std::span<T>(v), Op{}, opt);
    const std::size_t wrong = gs::testing::count_wrong(std::span<const T>(v), Op::id, n);
    const std::uint64_t h = gs::testing::fnv1a64(v.data(), v.size() * sizeof(T));
    std::lock_guard lk(o.m);
    o.wrong[r] += wrong;
    o.hashes[r].push_back(h);
  }
}

}  // namespace

TEST_CASE("three levels: exact and bitwise identical on every shape, type and inner algorithm") {
  gs::testbed::watchdog wd(240, "three levels exactness");
  const std::size_t shapes[][3] = {{2, 2, 2}, {1, 2, 3}, {3, 1, 2}, {2, 3, 1}, {1, 1, 1}};
  for (const auto& s : shapes) {
    const std::size_t n = s[0] * s[1] * s[2];
    CAPTURE(s[0]);
    CAPTURE(s[1]);
    CAPTURE(s[2]);
    three_outcome o(n);
    gs::call_options opt = deadline_20s();
    opt.verify = true;  // the result check over all three levels, on every call
    const auto errors = run_three(s[0], s[1], s[2], [&](three& t) {
      {
        std::lock_guard lk(o.m);
        o.seen.at(t.rank()) += 1;
      }
      CHECK(t.size() == n);
      cases<hier2, float, gs::op::sum_t>(t, o, opt);
      cases<hier2, float, gs::op::avg_t>(t, o, opt);
      cases<hier2, double, gs::op::prod_t>(t, o, opt);
      cases<hier2, gs::bfloat16, gs::op::max_t>(t, o, opt);
      cases<hier2, std::int64_t, gs::op::min_t>(t, o, opt);
      using tree_inside = gs::algo::hierarchical<gs::algo::hierarchical<gs::algo::tree>>;
      cases<tree_inside, std::int32_t, gs::op::sum_t>(t, o, opt);
    });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(errors[r] == "");
      CHECK(o.seen[r] == 1);  // the nested numbering covers every rank once
      CHECK(o.wrong[r] == 0);
      CHECK(o.hashes[r].size() == 6 * 5);
      CHECK(o.hashes[r] == o.hashes[0]);
    }
  }
}

TEST_CASE("three levels: avg divides once by all ranks of all levels") {
  gs::testbed::watchdog wd(60, "three levels avg");
  std::mutex m;
  std::vector<float> got;
  const auto errors = run_three(2, 2, 2, [&](three& t) {
    // Each rank gives rank + 1: the mean over 8 ranks is 36 / 8 = 4.5, exact.
    std::vector<float> v(5, static_cast<float>(t.rank() + 1));
    gs::allreduce<hier2>(t, std::span<float>(v), gs::op::avg, deadline_20s());
    std::lock_guard lk(m);
    got.insert(got.end(), v.begin(), v.end());
  });
  for (const auto& e : errors) CHECK(e == "");
  CHECK(got == std::vector<float>(8 * 5, 4.5f));
}

TEST_CASE("three levels: a different count on one rank fails every rank with a mismatch") {
  gs::testbed::watchdog wd(60, "three levels mismatch");
  // Rank 5 sits in the middle of everything: level-1 group {4, 5}, level-2 {5, 7},
  // level-3 {1, 5}. Every rank must get a mismatch, none a timeout.
  const auto errors = run_three(2, 2, 2, [](three& t) {
    std::vector<float> v(t.rank() == 5 ? 99 : 100, 1.0f);
    gs::allreduce<hier2>(t, std::span<float>(v), gs::op::sum, deadline_20s());
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    CAPTURE(r);
    CAPTURE(errors[r]);
    CHECK(errors[r].find("timeout") == std::string::npos);
    CHECK((errors[r].find("count 100 vs 99") != std::string::npos ||
           errors[r].find("count 99 vs 100") != std::string::npos ||
           errors[r].find("another node") != std::string::npos));
  }
  // The rank's own group (level 1) names the difference.
  CHECK(errors[4].find("count 100 vs 99") != std::string::npos);
  CHECK(errors[5].find("count 100 vs 99") != std::string::npos);
}

TEST_CASE("three levels: a NaN on one rank fails every rank as non-finite, naming it") {
  gs::testbed::watchdog wd(60, "three levels non-finite");
  const auto errors = run_three(2, 2, 2, [](three& t) {
    gs::call_options opt = deadline_20s();
    opt.check_finite = true;
    std::vector<float> v(64, 1.0f);
    if (t.rank() == 6) v[17] = std::numeric_limits<float>::quiet_NaN();
    gs::allreduce<hier2>(t, std::span<float>(v), gs::op::sum, opt);
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    CAPTURE(r);
    CAPTURE(errors[r]);
    CHECK(errors[r].find("non-finite input: rank 6 has NaN") != std::string::npos);
    CHECK(errors[r].find("at element 17") != std::string::npos);
  }
}

TEST_CASE("three levels: a rank that never calls fails every other rank, none hangs") {
  gs::testbed::watchdog wd(60, "three levels lost rank");
  // Rank 6 leaves at once; everyone else calls with a 2 s deadline. Each must end with
  // peer_lost (the group saw it leave) or a timeout, by the deadline: never a result.
  const auto errors = run_three(2, 2, 2, [](three& t) {
    if (t.rank() == 6) return;
    gs::call_options opt;
    opt.timeout = gs::seconds_d(2);
    std::vector<float> v(4096, 1.0f);
    gs::allreduce<hier2>(t, std::span<float>(v), gs::op::sum, opt);
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    CAPTURE(r);
    CAPTURE(errors[r]);
    if (r == 6) {
      CHECK(errors[r] == "");
    } else {
      CHECK((errors[r].find("peer_lost") != std::string::npos ||
             errors[r].find("timeout") != std::string::npos));
    }
  }
}

TEST_CASE("three levels: a bf16-compressed allreducer gives identical bits on every rank") {
  gs::testbed::watchdog wd(120, "three levels bf16");
  // Integers below 256 are exact in bfloat16 and their sums over 8 ranks too (< 2^8 x 8).
  const std::size_t n = 8, count = 3000;
  std::mutex m;
  std::vector<std::vector<float>> got(n);
  const auto errors = run_three(2, 2, 2, [&](three& t) {
    gs::allreducer_options o;
    o.call.timeout = gs::seconds_d(20);
    gs::allreducer<three, hier2, gs::fusion::bucket<4 << 10>, gs::compress::bf16> ar(t, o);
    std::vector<float> x(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<float>((i + t.rank()) % 31);
    ar.allreduce(std::span<float>(x), gs::op::sum);
    std::lock_guard lk(m);
    got[t.rank()] = x;
  });
  std::vector<float> want(count);
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t r = 0; r < n; ++r) want[i] += static_cast<float>((i + r) % 31);
  }
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(got[r] == want);
  }
}

TEST_CASE("three levels: the allreducer's buckets are exact and identical on every rank") {
  gs::testbed::watchdog wd(120, "three levels allreducer");
  const std::size_t sizes[] = {3, 1000, 17, 40000, 5, 2048};
  const std::size_t n = 8;
  std::mutex m;
  std::vector<std::vector<std::uint64_t>> digests(n);
  std::vector<std::size_t> wrong(n);
  const auto errors = run_three(2, 2, 2, [&](three& t) {
    gs::allreducer_options o;
    o.call.timeout = gs::seconds_d(20);
    gs::allreducer<three, hier2, gs::fusion::bucket<16 << 10>> ar(t, o);
    std::vector<std::vector<float>> ts;
    for (std::size_t s : sizes) ts.emplace_back(s);
    for (auto& x : ts) ar.add(std::span<float>(x));
    ar.commit(gs::op::sum);
    const std::size_t r = t.rank();
    for (std::size_t step = 0; step < 3; ++step) {
      for (auto& x : ts) gs::testing::fill_inputs(std::span<float>(x), gs::reduce_op::sum, r, n);
      for (std::size_t i = ts.size(); i-- > 0;) ar.ready(i);  // last layer first, as backward
      ar.wait();
      std::size_t bad = 0;
      std::uint64_t h = 0;
      for (auto& x : ts) {
        bad += gs::testing::count_wrong(std::span<const float>(x), gs::reduce_op::sum, n);
        h = h * 31 + gs::testing::fnv1a64(x.data(), x.size() * sizeof(float));
      }
      std::lock_guard lk(m);
      wrong[r] += bad;
      digests[r].push_back(h);
    }
  });
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(wrong[r] == 0);
    CHECK(digests[r].size() == 3);
    CHECK(digests[r] == digests[0]);
  }
}
