// SPDX-License-Identifier: Apache-2.0
// A new host algorithm is its header plus one list entry: gather_broadcast.hpp (outside
// the library) joins gradsync's host list here, and everything generic over the list
// picks it up: with_algorithm finds it by name, runs_on_v admits it where it composes,
// hierarchical<> takes it across nodes, and the allreducer traces its steps.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/algo/list.hpp>
#include <gradsync/algo/runs_on.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/observe/traced_transport.hpp>
#include <gradsync/transport/shm.hpp>

#include "gather_broadcast.hpp"
#include "two_level_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
namespace algo = gradsync::algo;
using gradsync_test::gather_broadcast;
using gs::transport::local;
using local2 = gs::transport::two_level<local, local>;

// The one entry.
using test_algorithms =
    algo::extend_t<algo::host_algorithms, algo::named<gather_broadcast, "gather_broadcast">>;

static_assert(gs::runs_on_v<gather_broadcast, local>);
static_assert(!gs::runs_on_v<gather_broadcast, local2>);  // flat: two_level runs hierarchical
static_assert(gs::runs_on_v<algo::hierarchical<gather_broadcast>, local2>);
static_assert(gs::observe::traces_steps_v<gather_broadcast, local>);
static_assert(algo::algorithm_names<test_algorithms>().back() == "gather_broadcast");

// Declared capabilities, read through traits_of / transport_traits_of.
static_assert(gs::traits_of<algo::ring, local>().generic);
static_assert(!gs::traits_of<algo::ring, local>().checks_headers);
static_assert(gs::traits_of<algo::direct_two_shot, gs::transport::shm>().checks_finite);
static_assert(gs::traits_of<algo::auto_select, gs::transport::shm>().checks_headers);
static_assert(!gs::traits_of<algo::auto_select, local>().checks_headers);
static_assert(gs::traits_of<algo::auto_select, local>().generic);
static_assert(!gs::traits_of<algo::auto_select, gs::transport::shm>().generic);
static_assert(algo::native::traits.needs_native && algo::hierarchical<>::traits.needs_two_level);
static_assert(!gs::transport_traits_of<local>().may_cross_network);
static_assert(gs::transport_traits_of<local2>().may_cross_network);
static_assert(gs::transport_traits_of<gs::transport::shm>().takes_wait_hook);
static_assert(algo::tuning::segment_bytes_for<local>() == algo::tuning::segment_bytes);

TEST_CASE("workspace: one buffer per key, kept and grown across calls") {
  gs::workspace w;
  struct a_key;
  struct b_key;
  void* const a = w.get<a_key>(100);
  void* const b = w.get<b_key>(100);
  CHECK(a != b);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % gs::workspace::alignment == 0);
  CHECK(w.get<a_key>(64) == a);  // smaller: the same buffer
  CHECK(w.held_bytes() == 2 * 128);
  // Each key's bytes stay its own: b's contents survive a's growth.
  static_cast<unsigned char*>(b)[0] = 0x5a;
  (void)w.get<a_key>(1 << 20);
  CHECK(static_cast<unsigned char*>(w.get<b_key>(1))[0] == 0x5a);
  CHECK(w.held_bytes() == (std::size_t{1} << 20) + 128);
  // An algorithm's own type is a key like any other (gather_broadcast uses itself).
  CHECK(w.get<gather_broadcast>(8) != w.get<algo::tree>(8));
}

TEST_CASE("algorithm list: names are unique and the library's come first") {
  const auto names = algo::algorithm_names<test_algorithms>();
  const auto lib = algo::algorithm_names<algo::host_algorithms>();
  CHECK(names.size() == lib.size() + 1);
  CHECK(std::set<std::string_view>(names.begin(), names.end()).size() == names.size());
  for (std::size_t i = 0; i < lib.size(); ++i) CHECK(names[i] == lib[i]);
  CHECK(!algo::with_algorithm<test_algorithms>("no_such_algorithm", []<class A>() {}));
}

TEST_CASE("algorithm list: an added algorithm runs exactly through the free entry point") {
  gs::testbed::watchdog wd(120, "algorithm list: gather_broadcast on local");
  constexpr std::size_t ranks = 3, count = 1001;
  std::mutex m;
  std::vector<std::vector<std::int64_t>> got(ranks);
  std::vector<std::vector<float>> avg(ranks);
  gs::transport::run_local(ranks, [&](local& t) {
    std::vector<std::int64_t> v(count);
    std::vector<float> f(count);
    for (std::size_t i = 0; i < count; ++i) {
      v[i] = static_cast<std::int64_t>(i * 31 + t.rank() * 1000003);
      f[i] = static_cast<float>((i % 97) * (t.rank() + 1));  // sums of small integers
    }
    // Every entry is instantiated (the name is matched at run time): skip what does not
    // compose, as every user of the list does.
    const bool found = algo::with_algorithm<test_algorithms>("gather_broadcast", [&]<class A>() {
      if constexpr (gs::runs_on_v<A, local>) {
        gs::allreduce<A>(t, std::span<std::int64_t>(v), gs::op::sum);
        gs::allreduce<A>(t, std::span<float>(f), gs::op::avg);
      }
    });
    CHECK(found);
    std::lock_guard lk(m);
    got[t.rank()] = v;
    avg[t.rank()] = f;
  });
  for (std::size_t i = 0; i < count; ++i) {
    std::int64_t want = 0;
    float sum = 0;
    for (std::size_t q = 0; q < ranks; ++q) {
      want += static_cast<std::int64_t>(i * 31 + q * 1000003);
      sum += static_cast<float>((i % 97) * (q + 1));
    }
    CHECK(got[0][i] == want);
    CHECK(avg[0][i] == sum / float(ranks));
  }
  for (std::size_t r = 1; r < ranks; ++r) {  // bitwise identical on every rank
    CHECK(got[r] == got[0]);
    CHECK(avg[r] == avg[0]);
  }
}

TEST_CASE("algorithm list: an added algorithm runs across nodes inside hierarchical<>") {
  gs::testbed::watchdog wd(120, "algorithm list: hierarchical<gather_broadcast>");
  std::mutex m;
  std::vector<std::vector<float>> got(4);
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [&](local intra, local inter) {
    local2 t(std::move(intra), std::move(inter));
    std::vector<float> v(517);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float((i * 7 + t.rank() * 3) % 64);
    gs::allreduce<algo::hierarchical<gather_broadcast>>(t, std::span<float>(v), gs::op::sum);
    std::lock_guard lk(m);
    got[t.rank()] = v;
  });
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    REQUIRE(got[r].size() == 517);
    for (std::size_t i = 0; i < got[r].size(); ++i) {
      float want = 0;
      for (std::size_t q = 0; q < 4; ++q) want += float((i * 7 + q * 3) % 64);
      CHECK(got[r][i] == want);
    }
  }
}

TEST_CASE("algorithm list: the allreducer runs an added algorithm and traces its steps") {
  gs::testbed::watchdog wd(120, "algorithm list: allreducer<local, gather_broadcast>");
  std::mutex m;
  std::vector<std::vector<float>> got(2);
  std::vector<gs::observe::call_stats> stats(2);
  gs::transport::run_local(2, [&](local& t) {
    std::vector<float> a(300, float(t.rank() + 1)), b(77, float(2 * t.rank()));
    gs::allreducer<local, gather_broadcast> ar(t);
    const std::vector<std::span<float>> list{std::span<float>(a), std::span<float>(b)};
    ar.allreduce(list, gs::op::sum);
    std::lock_guard lk(m);
    got[t.rank()] = a;
    got[t.rank()].insert(got[t.rank()].end(), b.begin(), b.end());
    stats[t.rank()] = ar.last_stats();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    REQUIRE(got[r].size() == 377);
    for (std::size_t i = 0; i < 300; ++i) CHECK(got[r][i] == 3.0f);
    for (std::size_t i = 300; i < 377; ++i) CHECK(got[r][i] == 2.0f);
    // Run through observe::traced_transport (generic = true): the bytes are counted, not
    // modelled. Each rank sends both tensors once (rank 1 up, rank 0 the results back),
    // plus its call header for each tensor's argument check (one Bruck round on 2 ranks).
    CHECK(stats[r].wire_measured);
    CHECK(stats[r].bytes_wire == 377 * sizeof(float) + 2 * sizeof(gs::call_header));
    CHECK(stats[r].algorithm == "gather_broadcast");
  }
}
