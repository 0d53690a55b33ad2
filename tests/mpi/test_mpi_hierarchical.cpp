// SPDX-License-Identifier: Apache-2.0
// algo::hierarchical over two_level_from_mpi (shm inside a node, mpi across nodes):
// "nodes" made of consecutive ranks (node_color) so a multi-node layout runs on one
// host, and the real shared-memory split (one node here). Exact results and bitwise
// identity across every rank; split into sub-groups (by local index, by node); an uneven
// layout refused on every rank; the allreducer (bucket fusion, progress thread) over the
// same two levels. The network tuning on one host (mpi_options::network): flat algorithms
// with every receive of a step in flight, hierarchical pipelined in pieces, and a failing
// piece failing every rank.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/allgather.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/algo/direct.hpp>
#include <gradsync/algo/halving_doubling.hpp>
#include <gradsync/algo/native.hpp>
#include <gradsync/algo/runs_on.hpp>
#include <gradsync/algo/tree.hpp>
#include <gradsync/allreducer.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

#include "mpi_harness.hpp"

namespace gs = gradsync;
using gs::testbed::world_rank;
using gs::testbed::world_size;

namespace {

using two_level = gs::transport::two_level<gs::transport::shm, gs::transport::mpi>;

// runs_on_v over MPI: native composes on mpi and across nodes, direct needs peer access
// (compile_fail/direct_on_mpi), flat algorithms do not run on the two_level itself.
static_assert(gs::runs_on_v<gs::algo::native, gs::transport::mpi>);
static_assert(!gs::runs_on_v<gs::algo::direct_two_shot, gs::transport::mpi>);
static_assert(gs::runs_on_v<gs::algo::hierarchical<gs::algo::native>, two_level>);
static_assert(!gs::runs_on_v<gs::algo::hierarchical<gs::algo::direct_two_shot>, two_level>);
static_assert(!gs::runs_on_v<gs::algo::native, two_level>);

template <class A, class T, class Op>
void exact_cases(two_level& t, std::vector<std::uint64_t>& hashes) {
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{9001}, std::size_t{300007}}) {
    std::vector<T> v(count);
    gs::testing::fill_inputs(std::span<T>(v), Op::id, t.rank(), t.size());
    gs::allreduce<A>(t, std::span<T>(v), Op{});
    const std::size_t wrong = gs::testing::count_wrong(std::span<const T>(v), Op::id, t.size());
    GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong of " + std::to_string(count));
    hashes.push_back(gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
  }
}

/// Every rank in nodes of `per_node` consecutive ranks (0: the shared-memory split).
void layout(std::size_t per_node) {
  const int color = per_node ? static_cast<int>(world_rank() / per_node) : -1;
  two_level t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, color);
  GS_CHECK(t.size() == world_size());
  GS_CHECK(t.rank() == world_rank());  // nodes of consecutive ranks: node-major = world order
  if (per_node) GS_CHECK(t.intra().size() == per_node);
  std::vector<std::uint64_t> hashes;
  exact_cases<gs::algo::hierarchical<>, float, gs::op::sum_t>(t, hashes);
  exact_cases<gs::algo::hierarchical<gs::algo::native>, double, gs::op::avg_t>(t, hashes);
  exact_cases<gs::algo::hierarchical<gs::algo::tree>, gs::bfloat16, gs::op::max_t>(t, hashes);
  exact_cases<gs::algo::hierarchical<gs::algo::native>, std::int64_t, gs::op::prod_t>(t, hashes);
  GS_CHECK(hashes.size() == 20);
  GS_CHECK(gs::testbed::same_on_all_ranks(hashes));
}

}  // namespace

GS_MPI_TEST("hierarchical: nodes of 2 ranks (shm) across mpi", 120) {
  if (world_size() % 2) GS_SKIP("needs an even rank count");
  layout(2);
}

GS_MPI_TEST("hierarchical: nodes of 3 ranks (shm) across mpi", 120) {
  if (world_size() % 3) GS_SKIP("needs a multiple of 3 ranks");
  layout(3);
}

GS_MPI_TEST("hierarchical: the shared-memory split (one node here)", 120) {
  layout(0);
}

GS_MPI_TEST("hierarchical: split by local index and by node, numbered node-major", 120) {
  if (world_size() % 2) GS_SKIP("needs an even rank count");
  const std::size_t r = world_rank(), nodes = world_size() / 2;
  two_level t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, static_cast<int>(r / 2));
  // Local index 0 or 1 of every node, keys highest rank first: the last node comes first.
  two_level column = t.split(static_cast<int>(r % 2), -static_cast<int>(r));
  two_level node = t.split(static_cast<int>(r / 2), 0);  // each node alone
  GS_CHECK(column.size() == nodes && column.intra().size() == 1);
  GS_CHECK(column.rank() == nodes - 1 - r / 2);
  GS_CHECK(node.size() == 2 && node.inter().size() == 1 && node.rank() == r % 2);
  for (two_level* s : {&column, &node}) {
    std::vector<std::uint64_t> hashes;
    exact_cases<gs::algo::hierarchical<gs::algo::native>, double, gs::op::sum_t>(*s, hashes);
    std::vector<std::int64_t> order(s->size());
    const std::int64_t mine = static_cast<std::int64_t>(r);
    gs::allgather(*s, std::span<const std::int64_t>(&mine, 1), std::span<std::int64_t>(order));
    for (std::size_t q = 0; q < order.size(); ++q) {
      const std::size_t want = s == &node ? (r / 2) * 2 + q : (nodes - 1 - q) * 2 + r % 2;
      GS_CHECK_MSG(order[q] == static_cast<std::int64_t>(want),
                   "rank " + std::to_string(q) + " of the sub-group is world rank " +
                       std::to_string(order[q]) + ", not " + std::to_string(want));
    }
  }
  // A colour at local index 0 on node 0 and 1 elsewhere cannot be linked: every rank fails.
  if (nodes >= 2) {
    const int color = r == 0 || r == 3 ? 1 : 0;
    const std::string msg = GS_CHECK_ERROR((void)t.split(color, 0), gs::errc::invalid_argument);
    GS_CHECK_MSG(gs::testbed::contains(msg, "the ranks of color 1 sit at different local indices"),
                 msg);
  }
}

GS_MPI_TEST("hierarchical: uneven nodes are refused on every rank", 60) {
  if (world_size() != 3 && world_size() != 5) GS_SKIP("needs 3 or 5 ranks");
  // Nodes of 2 consecutive ranks: the last node has one.
  const int color = static_cast<int>(world_rank() / 2);
  const std::string msg = GS_CHECK_ERROR(
      (void)gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, color), gs::errc::mismatch);
  GS_CHECK_MSG(gs::testbed::contains(msg, "nodes must have equal numbers of ranks"), msg);
}

GS_MPI_TEST("hierarchical: a mismatch inside one node fails every rank at once", 60) {
  if (world_size() != 4) GS_SKIP("needs 4 ranks");
  two_level t =
      gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, static_cast<int>(world_rank() / 2));
  gs::call_options opt;
  opt.timeout = gs::seconds_d(30);
  std::vector<float> v(world_rank() == 3 ? 99 : 100, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = GS_CHECK_ERROR(
      gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(v), gs::op::sum, opt),
      gs::errc::mismatch);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GS_CHECK_MSG(s < 10, "took " + std::to_string(s) + " s: a node waited for its deadline");
  GS_CHECK_MSG(gs::testbed::contains(msg, world_rank() >= 2 ? "count 100 vs 99" : "another node"),
               msg);
  gs::testbed::keep_until_exit(std::move(t));
}

GS_MPI_TEST("hierarchical: the allreducer's buckets, ready() in random orders, exact", 120) {
  const std::size_t per_node = world_size() % 2 ? 1 : 2;
  two_level t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {},
                                                  static_cast<int>(world_rank() / per_node));
  std::vector<std::uint64_t> hashes;
  {
    gs::allreducer<two_level, gs::algo::hierarchical<gs::algo::native>,
                   gs::fusion::bucket<16 << 10>>
        ar(t);
    // 30 tensors of 1..30000 floats: several buckets, some tensors alone in one.
    std::vector<std::vector<float>> g(30);
    std::vector<std::size_t> first(g.size());
    for (std::size_t i = 0, at = 0; i < g.size(); ++i) {
      g[i].resize((i * 7919) % 30000 + 1);
      first[i] = at;
      at += g[i].size();
      ar.add(std::span<float>(g[i]), "g" + std::to_string(i));
    }
    ar.commit(gs::op::sum);
    std::vector<std::size_t> order(g.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937_64 rng(world_rank() + 1);
    for (int step = 0; step < 3; ++step) {
      for (std::size_t i = 0; i < g.size(); ++i) {
        gs::testing::fill_inputs(std::span<float>(g[i]), gs::reduce_op::sum, t.rank(), t.size(),
                                 first[i]);
      }
      std::shuffle(order.begin(), order.end(), rng);  // a different order on every rank
      for (std::size_t i : order) ar.ready(i);
      ar.wait();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        wrong += gs::testing::count_wrong(std::span<const float>(g[i]), gs::reduce_op::sum,
                                          t.size(), first[i]);
        hashes.push_back(gs::testing::fnv1a64(g[i].data(), g[i].size() * sizeof(float)));
      }
      GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong in step " + std::to_string(step));
    }
    GS_CHECK_MSG(gs::testbed::contains(ar.summary(), "hierarchical"), ar.summary());
  }
  GS_CHECK(gs::testbed::same_on_all_ranks(hashes));
}

GS_MPI_TEST("network tuning: flat ring/halving_doubling/tree keep a step's receives in flight",
            180) {
  // network_hint::yes: the algorithms run as across hosts (every receive of a step
  // posted at once, no huge-page staging off-host) while the ranks share this host.
  gs::transport::mpi t(MPI_COMM_WORLD, {.network = gs::transport::network_hint::yes});
  GS_CHECK(t.crosses_network());
  GS_CHECK(gs::algo::tuning::inflight_segments(t, 37, 4) == 37);
  std::vector<std::uint64_t> hashes;
  for (std::size_t count : {std::size_t{1}, std::size_t{9001}, (std::size_t{3} << 20) + 11}) {
    auto one = [&]<class A, class T, class Op>() {
      std::vector<T> v(count);
      gs::testing::fill_inputs(std::span<T>(v), Op::id, t.rank(), t.size());
      gs::allreduce<A>(t, std::span<T>(v), Op{});
      const std::size_t wrong = gs::testing::count_wrong(std::span<const T>(v), Op::id, t.size());
      GS_CHECK_MSG(wrong == 0, std::string(A::name) + ": " + std::to_string(wrong) + " wrong of " +
                                   std::to_string(count));
      hashes.push_back(gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
    };
    one.template operator()<gs::algo::ring, float, gs::op::sum_t>();
    one.template operator()<gs::algo::halving_doubling, double, gs::op::avg_t>();
    one.template operator()<gs::algo::tree, std::int32_t, gs::op::max_t>();
  }
  GS_CHECK(gs::testbed::same_on_all_ranks(hashes));
  // Detected by default: every rank of this job shares one host.
  gs::transport::mpi plain(MPI_COMM_WORLD);
  GS_CHECK(!plain.crosses_network());
  for (std::size_t r = 0; r < world_size(); ++r) GS_CHECK(plain.same_host(r));
}

GS_MPI_TEST("network tuning: hierarchical, reduce_scatter and allgather pipeline pieces", 180) {
  if (world_size() % 2) GS_SKIP("needs an even rank count");
  two_level t =
      gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, static_cast<int>(world_rank() / 2),
                                        {.network = gs::transport::network_hint::yes});
  GS_CHECK(t.crosses_network());  // network_hint::yes, even with one node
  GS_CHECK(t.pipelines());        // MPI_THREAD_MULTIPLE here
  std::vector<std::uint64_t> hashes;
  // 8 MiB + 1 element: 2 pieces, the last one longer; 40 MiB: 8 pieces.
  for (std::size_t count : {(std::size_t{2} << 20) + 1, std::size_t{10} << 20}) {
    GS_CHECK(gs::algo::tuning::hierarchical_pieces(count * sizeof(float), true) ==
             (count == (std::size_t{2} << 20) + 1 ? 2u : 8u));
    std::vector<float> v(count);
    gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::avg, t.rank(), t.size());
    gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(v), gs::op::avg);
    std::size_t wrong =
        gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::avg, t.size());
    GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong of " + std::to_string(count));
    hashes.push_back(gs::testing::fnv1a64(v.data(), v.size() * sizeof(float)));
    std::vector<std::int64_t> w(count / 4);
    gs::testing::fill_inputs(std::span<std::int64_t>(w), gs::reduce_op::sum, t.rank(), t.size());
    gs::allreduce<gs::algo::hierarchical<gs::algo::native>>(t, std::span<std::int64_t>(w),
                                                            gs::op::sum);
    wrong =
        gs::testing::count_wrong(std::span<const std::int64_t>(w), gs::reduce_op::sum, t.size());
    GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong (native, int64)");
    hashes.push_back(gs::testing::fnv1a64(w.data(), w.size() * sizeof(std::int64_t)));
    // reduce_scatter and allgather pipeline alike (pieces by input and output bytes).
    const std::size_t n = t.size(), m = count / n + 1;
    std::vector<float> in(n * m), out(m);
    gs::testing::fill_inputs(std::span<float>(in), gs::reduce_op::sum, t.rank(), n);
    gs::reduce_scatter(t, std::span<const float>(in), std::span<float>(out), gs::op::sum);
    wrong =
        gs::testing::count_wrong(std::span<const float>(out), gs::reduce_op::sum, n, t.rank() * m);
    GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong (reduce_scatter)");
    std::vector<std::int32_t> mine(m), all(n * m);
    for (std::size_t i = 0; i < m; ++i) mine[i] = static_cast<std::int32_t>(t.rank() * m + i);
    gs::allgather(t, std::span<const std::int32_t>(mine), std::span<std::int32_t>(all));
    wrong = 0;
    for (std::size_t i = 0; i < n * m; ++i) wrong += all[i] != static_cast<std::int32_t>(i);
    GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong (allgather)");
  }
  GS_CHECK(gs::testbed::same_on_all_ranks(hashes));
}

namespace {
// Rank 3 (node 1) skips `call` on a 2 x 2 two_level across a "network": node 0's pieces
// time out across nodes, and rank 2, waiting for its node-mate inside the node, times out
// too. Nobody hangs, and every rank names rank 3: directly (a timeout waiting for it, or
// its silence at the last query) or through a peer's relayed failure (peer_lost quoting
// it). `call` gets a 1.5 s deadline with the argument check off, so that the data phase
// itself fails.
void missing_rank_fails_every_rank(
    const std::function<void(two_level&, const gs::call_options&)>& call) {
  two_level t =
      gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, static_cast<int>(world_rank() / 2),
                                        {.network = gs::transport::network_hint::yes});
  GS_REQUIRE(t.pipelines());
  gs::call_options opt;
  opt.timeout = gs::seconds_d(1.5);
  opt.check = false;
  if (world_rank() != 3) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string msg = "(no error)";
    try {
      call(t, opt);
    } catch (const gs::error& e) {
      msg = e.what();
      GS_CHECK_MSG(e.code() == gs::errc::timeout || e.code() == gs::errc::peer_lost, msg);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    GS_CHECK_MSG(s < 10, "took " + std::to_string(s) + " s");
    GS_CHECK_MSG(gs::testbed::contains(msg, "(peer 3)") || gs::testbed::contains(msg, "rank 3 on "),
                 msg);
  }
  gs::testbed::keep_until_exit(std::move(t));
}
}  // namespace

GS_MPI_TEST("network tuning: a failing inter-node piece fails the call on every rank", 120) {
  if (world_size() != 4) GS_SKIP("needs 4 ranks");
  missing_rank_fails_every_rank([](two_level& t, const gs::call_options& opt) {
    std::vector<float> v(std::size_t{4} << 20, 1.0f);
    gs::allreduce<gs::algo::hierarchical<>>(t, std::span<float>(v), gs::op::sum, opt);
  });
}

// The same for the allgather, whose pieces are all posted across the nodes at once: no
// posted piece is left behind that would block the end of the job.
GS_MPI_TEST("network tuning: a pipelined two-level allgather missing a rank fails every rank",
            120) {
  if (world_size() != 4) GS_SKIP("needs 4 ranks");
  const std::size_t m = std::size_t{2} << 20;  // 32 MiB of output: 8 pieces
  GS_CHECK(gs::algo::tuning::hierarchical_pieces(4 * m * sizeof(float), true) == 8);
  missing_rank_fails_every_rank([m](two_level& t, const gs::call_options& opt) {
    std::vector<float> mine(m, 1.0f), all(4 * m);
    gs::allgather(t, std::span<const float>(mine), std::span<float>(all), opt);
  });
}

GS_MPI_TEST("hierarchical: three levels, shm inside shm inside mpi", 180) {
  if (world_size() % 4) GS_SKIP("needs a multiple of 4 ranks");
  // rank = (host * 2 + socket) * 2 + a. Level 1: the pair of one socket (shm). The ranks
  // of one index a form a two_level of their own: the sockets of a host (shm, level 2),
  // the hosts (mpi, level 3). Hosts and sockets are simulated on one machine.
  const int r = static_cast<int>(world_rank());
  MPI_Comm pair, column;
  MPI_Comm_split(MPI_COMM_WORLD, r / 2, r, &pair);
  MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &column);
  int c = 0;
  MPI_Comm_rank(column, &c);
  using three = gs::transport::two_level<gs::transport::shm, two_level>;
  {
    three t(gs::transport::shm_from_mpi(pair),
            gs::transport::two_level_from_mpi(column, {}, c / 2));
    GS_CHECK(t.size() == world_size());
    GS_CHECK(t.rank() == world_rank());
    GS_CHECK(t.inter().inter().size() == world_size() / 4);
    using hier2 = gs::algo::hierarchical<gs::algo::hierarchical<>>;
    using hier2_native = gs::algo::hierarchical<gs::algo::hierarchical<gs::algo::native>>;
    std::vector<std::uint64_t> hashes;
    for (std::size_t count :
         {std::size_t{0}, std::size_t{3}, std::size_t{9001}, std::size_t{300007}}) {
      std::vector<float> f(count);
      std::vector<double> d(count);
      gs::testing::fill_inputs(std::span<float>(f), gs::reduce_op::sum, t.rank(), t.size());
      gs::testing::fill_inputs(std::span<double>(d), gs::reduce_op::avg, t.rank(), t.size());
      gs::allreduce<hier2>(t, std::span<float>(f), gs::op::sum);
      gs::allreduce<hier2_native>(t, std::span<double>(d), gs::op::avg);
      GS_CHECK(gs::testing::count_wrong(std::span<const float>(f), gs::reduce_op::sum, t.size()) ==
               0);
      GS_CHECK(gs::testing::count_wrong(std::span<const double>(d), gs::reduce_op::avg, t.size()) ==
               0);
      hashes.push_back(gs::testing::fnv1a64(f.data(), f.size() * sizeof(float)));
      hashes.push_back(gs::testing::fnv1a64(d.data(), d.size() * sizeof(double)));
    }
    // The allreducer over the same three levels: buckets, progress thread, three steps.
    gs::allreducer<three, hier2, gs::fusion::bucket<64 << 10>> ar(t);
    std::vector<std::vector<float>> ts(5);
    const std::size_t sizes[] = {10, 70000, 3, 20000, 4099};
    for (std::size_t i = 0; i < ts.size(); ++i) {
      ts[i].resize(sizes[i]);
      ar.add(std::span<float>(ts[i]));
    }
    ar.commit(gs::op::sum);
    for (int step = 0; step < 3; ++step) {
      for (auto& x : ts)
        gs::testing::fill_inputs(std::span<float>(x), gs::reduce_op::sum, t.rank(), t.size());
      for (std::size_t i = ts.size(); i-- > 0;) ar.ready(i);
      ar.wait();
      for (auto& x : ts) {
        GS_CHECK(
            gs::testing::count_wrong(std::span<const float>(x), gs::reduce_op::sum, t.size()) == 0);
        hashes.push_back(gs::testing::fnv1a64(x.data(), x.size() * sizeof(float)));
      }
    }
    GS_CHECK(hashes.size() == 8 + 15);
    GS_CHECK(gs::testbed::same_on_all_ranks(hashes));
  }
  MPI_Comm_free(&pair);
  MPI_Comm_free(&column);
}
