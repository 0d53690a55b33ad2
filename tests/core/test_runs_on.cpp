// SPDX-License-Identifier: Apache-2.0
// gradsync::runs_on_v: the compile-time "does A compose with Tr" answer agrees with what
// the entry points accept (every pair it admits runs here, exactly; each pair it refuses
// has a compile_fail test under tests/compile_fail naming the same rule), on flat,
// peer-access and two-level transports.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/algo/list.hpp>
#include <gradsync/algo/runs_on.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/transport/shm.hpp>

#include "two_level_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
namespace algo = gradsync::algo;
using gs::runs_on_v;
using gs::transport::local;
using gs::transport::shm;
using local2 = gs::transport::two_level<local, local>;
using shm_local = gs::transport::two_level<shm, local>;

// Flat host transport without peer access or an allreduce of its own.
static_assert(runs_on_v<algo::ring, local> && runs_on_v<algo::tree, local>);
static_assert(runs_on_v<algo::halving_doubling, local> && runs_on_v<algo::auto_select, local>);
static_assert(!runs_on_v<algo::direct_two_shot, local>);  // compile_fail/peer_access_on_local
static_assert(!runs_on_v<algo::direct_one_shot, local>);
static_assert(!runs_on_v<algo::native, local>);          // compile_fail/native_on_local
static_assert(!runs_on_v<algo::hierarchical<>, local>);  // compile_fail/hierarchical_on_flat
// Peer access: the direct algorithms compose, native still does not.
static_assert(runs_on_v<algo::direct_two_shot, shm> && runs_on_v<algo::direct_one_shot, shm>);
static_assert(runs_on_v<algo::ring, shm> && runs_on_v<algo::auto_select, shm>);
static_assert(!runs_on_v<algo::native, shm> && !runs_on_v<algo::hierarchical<>, shm>);
// Two levels: hierarchical only (compile_fail/flat_on_two_level), and only when its
// inter-node algorithm runs on the inter-node transport.
static_assert(runs_on_v<algo::hierarchical<>, local2>);
static_assert(runs_on_v<algo::hierarchical<algo::tree>, local2>);
static_assert(!runs_on_v<algo::ring, local2> && !runs_on_v<algo::auto_select, local2>);
static_assert(!runs_on_v<algo::hierarchical<algo::native>, local2>);  // local has no native
static_assert(!runs_on_v<algo::hierarchical<algo::direct_two_shot>, local2>);
static_assert(runs_on_v<algo::hierarchical<>, shm_local>);
static_assert(!runs_on_v<algo::hierarchical<algo::direct_two_shot>, shm_local>);
// Not a transport at all.
static_assert(!runs_on_v<algo::ring, int>);
// The level concept (transport/levels.hpp), which the entry points, the allreducer and
// the composition table ask for: a two_level, nested or not, has levels; a transport has
// one; both are level groups.
static_assert(gs::transport::leveled<local2> && gs::transport::leveled<shm_local>);
static_assert(gs::transport::leveled<gs::transport::two_level<local, local2>>);
static_assert(!gs::transport::leveled<local> && !gs::transport::leveled<shm>);
static_assert(gs::transport::level_group<local> && gs::transport::level_group<local2>);
static_assert(!gs::transport::level_group<int>);

namespace {

// gradsync's host list plus the two inter-node algorithms it does not name.
using all_algorithms = algo::extend_t<
    algo::host_algorithms, algo::named<algo::hierarchical<algo::tree>, "hierarchical_tree">,
    algo::named<algo::hierarchical<algo::halving_doubling>, "hierarchical_halving_doubling">>;

/// Runs allreduce<A> (float sum of small integers) for every A in the list that
/// runs_on_v admits on Tr; returns the names that ran and counts wrong elements.
template <class Tr>
std::vector<std::string> run_admitted(Tr& t, std::size_t& wrong) {
  std::vector<std::string> ran;
  const std::size_t n = t.size(), r = t.rank(), count = 1000;
  algo::for_each_algorithm<all_algorithms>([&]<class A>(std::string_view name) {
    if constexpr (runs_on_v<A, Tr>) {
      std::vector<float> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = float((i * 7 + r * 3) % 64);
      gs::allreduce<A>(t, std::span<float>(v), gs::op::sum);
      for (std::size_t i = 0; i < count; ++i) {
        float want = 0;
        for (std::size_t q = 0; q < n; ++q) want += float((i * 7 + q * 3) % 64);
        wrong += v[i] != want;
      }
      ran.emplace_back(name);
    }
  });
  return ran;
}

}  // namespace

TEST_CASE("runs_on_v: every admitted algorithm runs exactly on local threads") {
  gs::testbed::watchdog wd(120, "runs_on_v local");
  std::mutex m;
  std::vector<std::vector<std::string>> ran(3);
  std::vector<std::size_t> wrong(3);
  gs::transport::run_local(3, [&](local& t) {
    std::size_t w = 0;
    auto names = run_admitted(t, w);
    std::lock_guard lk(m);
    ran[t.rank()] = names;
    wrong[t.rank()] = w;
  });
  const std::vector<std::string> want = {"ring", "tree", "halving_doubling", "auto"};
  for (std::size_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(ran[r] == want);
    CHECK(wrong[r] == 0);
  }
}

TEST_CASE("runs_on_v: every admitted algorithm runs exactly on a 2 x 2 two_level") {
  gs::testbed::watchdog wd(120, "runs_on_v two_level");
  std::mutex m;
  std::vector<std::vector<std::string>> ran(4);
  std::vector<std::size_t> wrong(4);
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [&](local intra, local inter) {
    local2 t(std::move(intra), std::move(inter));
    std::size_t w = 0;
    auto names = run_admitted(t, w);
    std::lock_guard lk(m);
    ran[t.rank()] = names;
    wrong[t.rank()] = w;
  });
  const std::vector<std::string> want = {"hierarchical", "hierarchical_tree",
                                         "hierarchical_halving_doubling"};
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
    CHECK(ran[r] == want);
    CHECK(wrong[r] == 0);
  }
}
