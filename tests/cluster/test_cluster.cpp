// SPDX-License-Identifier: Apache-2.0
// Suite 'cluster': the same job's ranks on several simulated hosts (scripts/vcluster:
// network namespaces, TCP between hosts, shared memory inside one), 2 hosts x 2 ranks
// and 2 + 1. Node discovery, the exact-result matrix (reduced) for flat transport::mpi
// algorithms and for two_level + hierarchical across hosts, bitwise identity across
// ranks, the two-level collectives in pieces, the allreducer's buckets over two_level,
// and an error naming the world rank and host of a peer on the other host. Run by
// tests/cluster/run.sh.
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <gradsync/algo/hierarchical.hpp>
#include <gradsync/algo/native.hpp>
#include <gradsync/allgather.hpp>
#include <gradsync/allreducer.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

#include "mpi_harness.hpp"

namespace gs = gradsync;
using gs::testbed::world_rank;
using gs::testbed::world_size;

namespace {

using two_level = gs::transport::two_level<gs::transport::shm, gs::transport::mpi>;

/// The simulated host this rank runs on (scripts/vcluster exports GS_NETNS).
std::string host_of_this_rank() {
  const char* h = std::getenv("GS_NETNS");
  return h ? h : "";
}

/// Every rank's host, in world rank order.
std::vector<std::string> every_host() {
  char mine[16] = {};
  const std::string h = host_of_this_rank();
  h.copy(mine, sizeof mine - 1);
  std::vector<char> all(sizeof mine * world_size());
  MPI_Allgather(mine, sizeof mine, MPI_CHAR, all.data(), sizeof mine, MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < world_size(); ++r) out.emplace_back(&all[r * sizeof mine]);
  return out;
}

/// Whether every host holds the same number of ranks (two_level needs it).
bool even_hosts() {
  const auto hosts = every_host();
  std::size_t here = 0, first = 0;
  for (const auto& h : hosts) here += h == host_of_this_rank(), first += h == hosts[0];
  std::uint64_t same = here == first ? 1 : 0;
  return gs::testbed::same_on_all_ranks({same}) && same;
}

// Counts: empty, one element, odd small, and vectors of several 1 MiB segments, so
// messages cross the link with every receive of a step in flight and, from 8 MiB,
// hierarchical pipelines its pieces.
const std::vector<std::size_t> counts = {0, 1, 9001, 300007, (std::size_t{5} << 20) / 2 + 3};

template <class A, class T, class Op, class Tr>
void exact(Tr& t, std::vector<std::uint64_t>& hashes, const char* what) {
  for (std::size_t count : counts) {
    std::vector<T> v(count);
    gs::testing::fill_inputs(std::span<T>(v), Op::id, t.rank(), t.size());
    gs::allreduce<A>(t, std::span<T>(v), Op{});
    const std::size_t wrong = gs::testing::count_wrong(std::span<const T>(v), Op::id, t.size());
    GS_CHECK_MSG(wrong == 0, std::string(what) + ": " + std::to_string(wrong) + " wrong of " +
                                 std::to_string(count));
    hashes.push_back(gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
  }
}

}  // namespace

GS_MPI_TEST("cluster: every rank runs inside a simulated host", 30) {
  GS_REQUIRE(!host_of_this_rank().empty());  // launched by scripts/vcluster run
  const auto hosts = every_host();
  std::size_t distinct = 0;
  for (std::size_t r = 0; r < hosts.size(); ++r) distinct += r == 0 || hosts[r] != hosts[r - 1];
  GS_CHECK_MSG(distinct >= 2, "all ranks on one host: " + hosts[0]);
}

GS_MPI_TEST("cluster: node discovery: each host's shm group is exactly its ranks", 60) {
  const auto hosts = every_host();
  const std::string me = host_of_this_rank();
  std::size_t on_my_host = 0, below_me = 0;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    if (hosts[r] != me) continue;
    ++on_my_host;
    below_me += r < world_rank();
  }
  gs::transport::mpi flat(MPI_COMM_WORLD);
  GS_CHECK(flat.crosses_network());
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    GS_CHECK_MSG(flat.same_host(r) == (hosts[r] == me), "rank " + std::to_string(r));
  }
  // A split's group takes its hosts from the parent: the parity groups span both hosts.
  gs::transport::mpi half = flat.split(static_cast<int>(world_rank() % 2), 0);
  for (std::size_t k = 0; k < half.size(); ++k) {
    const std::size_t r = 2 * k + world_rank() % 2;  // rank k of my parity group
    GS_CHECK_MSG(half.same_host(k) == (hosts[r] == me), "split rank " + std::to_string(k));
  }
  bool spans = false;
  for (std::size_t r = world_rank() % 2; r < hosts.size(); r += 2) spans = spans || hosts[r] != me;
  GS_CHECK(half.crosses_network() == spans);
  // node_color groups must not span hosts: every rank refuses, naming both ends.
  const std::string msg =
      GS_CHECK_ERROR((void)gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {},
                                                             static_cast<int>(world_rank() % 2)),
                     gs::errc::invalid_argument);
  GS_CHECK_MSG(gs::testbed::contains(msg, "node_color 0 are on several hosts (rank 0 on " +
                                              hosts[0] + ", rank 2 on " + hosts[2] + ")"),
               msg);
  auto t = gs::transport::shm_from_mpi(MPI_COMM_WORLD);
  GS_CHECK_MSG(t.size() == on_my_host,
               std::to_string(t.size()) + " vs " + std::to_string(on_my_host) + " ranks on " + me);
  GS_CHECK(t.rank() == below_me);
  if (!even_hosts()) return;
  two_level tl = gs::transport::two_level_from_mpi(MPI_COMM_WORLD);
  GS_CHECK(tl.intra().size() == on_my_host);
  GS_CHECK(tl.inter().size() == world_size() / on_my_host);
  GS_CHECK(tl.rank() == world_rank());  // block placement: node-major order = world order
  GS_CHECK(tl.crosses_network());
  GS_CHECK(tl.pipelines());  // MPI_THREAD_MULTIPLE here
}

// Rank 0 and the last rank sit on different hosts: with network_message_bytes their
// messages are cut into that size and arrive whole; with 0, and to a rank on the same
// host, a message stays one MPI message. network_auto (the default) measures the link
// here (under MPICH) and cuts to 16 KiB below 4 Gbit/s, the same choice on every rank.
GS_MPI_TEST("cluster: messages to another host are cut at network_message_bytes", 60) {
  const std::size_t bytes = (100 << 10) + 3;
  for (const std::size_t asked :
       {std::size_t{0}, std::size_t{16} << 10, gs::transport::mpi_options::network_auto}) {
    gs::transport::mpi t(MPI_COMM_WORLD, {.network_message_bytes = asked});
    const std::size_t n = t.size(), cut = t.options().network_message_bytes;
    if (asked != gs::transport::mpi_options::network_auto) {
      GS_CHECK(cut == asked && t.link_gbps() == 0);
    } else {
      const double gbps = t.link_gbps();
      const bool measured = gs::transport::detail::network_cut_helps;  // MPICH, not Open MPI
      GS_CHECK_MSG(measured ? gbps > 0 : gbps == 0, std::to_string(gbps) + " Gbit/s");
      const bool slow = gbps > 0 && gbps < gs::transport::detail::cut_below_gbps;
      GS_CHECK_MSG(cut == (slow ? gs::transport::detail::network_cut_bytes : 0),
                   std::to_string(cut) + " at " + std::to_string(gbps) + " Gbit/s");
      GS_CHECK(gs::testbed::same_on_all_ranks(std::vector<std::uint64_t>{cut}));
      // A split keeps the choice (two_level_from_mpi's level across the hosts is one).
      gs::transport::mpi half = t.split(static_cast<int>(t.rank() % 2), 0);
      GS_CHECK(half.options().network_message_bytes == cut && half.link_gbps() == gbps);
    }
    auto exchange = [&](std::size_t peer, std::size_t parts) {
      std::vector<std::uint8_t> out(bytes), in(bytes, 0);
      for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::uint8_t>(i * 7 + t.rank());
      const auto d = gs::deadline::after(gs::seconds_d{30});
      auto rq = t.irecv(peer, in.data(), bytes, 5);
      auto sq = t.isend(peer, out.data(), bytes, 5);
      GS_CHECK_MSG(rq.parts() == parts && sq.parts() == parts,
                   std::to_string(rq.parts()) + " parts, expected " + std::to_string(parts));
      t.wait(rq, d);
      t.wait(sq, d);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < bytes; ++i) {
        wrong += in[i] != static_cast<std::uint8_t>(i * 7 + peer);
      }
      GS_CHECK_MSG(wrong == 0,
                   std::to_string(wrong) + " bytes wrong from rank " + std::to_string(peer));
    };
    const std::size_t across = cut ? (bytes + cut - 1) / cut : 1;  // 7 at 16 KiB
    if (t.rank() == 0 || t.rank() == n - 1) {
      const std::size_t peer = t.rank() == 0 ? n - 1 : 0;
      GS_REQUIRE(!t.same_host(peer));
      exchange(peer, across);
    }
    if (n == 4 && t.rank() < 2) exchange(1 - t.rank(), 1);  // 2 x 2: ranks 0 and 1 share a host
  }
}

GS_MPI_TEST("cluster: flat mpi algorithms across hosts, exact and bitwise identical", 240) {
  gs::transport::mpi t(MPI_COMM_WORLD);
  std::vector<std::uint64_t> h;
  exact<gs::algo::ring, float, gs::op::sum_t>(t, h, "ring float sum");
  exact<gs::algo::ring, double, gs::op::avg_t>(t, h, "ring double avg");
  exact<gs::algo::halving_doubling, gs::bfloat16, gs::op::max_t>(t, h, "hd bf16 max");
  exact<gs::algo::tree, std::int32_t, gs::op::sum_t>(t, h, "tree int32 sum");
  exact<gs::algo::auto_select, gs::half, gs::op::min_t>(t, h, "auto half min");
  exact<gs::algo::native, std::int64_t, gs::op::prod_t>(t, h, "native int64 prod");
  GS_CHECK(h.size() == 6 * counts.size());
  GS_CHECK(gs::testbed::same_on_all_ranks(h));
}

GS_MPI_TEST("cluster: two_level + hierarchical across hosts, exact and bitwise identical", 240) {
  if (!even_hosts()) {
    // Uneven hosts: two_level refuses on every rank, naming the counts.
    const std::string msg =
        GS_CHECK_ERROR((void)gs::transport::two_level_from_mpi(MPI_COMM_WORLD), gs::errc::mismatch);
    GS_CHECK_MSG(gs::testbed::contains(msg, "nodes must have equal numbers of ranks"), msg);
    return;
  }
  two_level t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD);
  std::vector<std::uint64_t> h;
  exact<gs::algo::hierarchical<>, float, gs::op::sum_t>(t, h, "hier<ring> float sum");
  exact<gs::algo::hierarchical<gs::algo::native>, double, gs::op::avg_t>(t, h, "hier<native> avg");
  exact<gs::algo::hierarchical<gs::algo::tree>, gs::bfloat16, gs::op::max_t>(t, h,
                                                                             "hier<tree> max");
  exact<gs::algo::hierarchical<gs::algo::auto_select>, std::int32_t, gs::op::sum_t>(
      t, h, "hier<auto> int32 sum");
  GS_CHECK(h.size() == 4 * counts.size());
  GS_CHECK(gs::testbed::same_on_all_ranks(h));
}

// Across hosts two_level pipelines its collectives (tuning::hierarchical_pieces: from
// 8 MiB, pieces of 4 MiB), which a single host never does: sizes on both sides of that.
GS_MPI_TEST("cluster: two-level broadcast, reduce_scatter and allgather in pieces, exact", 240) {
  if (!even_hosts()) return;  // two_level refuses uneven hosts (the case above checks how)
  // Whole messages across the network, and cut into 16 KiB ones (network_message_bytes).
  for (const std::size_t cut : {std::size_t{0}, std::size_t{16} << 10}) {
    two_level t =
        gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, -1, {.network_message_bytes = cut});
    GS_CHECK(t.pipelines());
    const std::size_t n = t.size(), r = t.rank();
    const gs::call_options opt{.timeout = gs::seconds_d{60}};
    std::vector<std::uint64_t> h;
    std::size_t wrong = 0;
    // Per-rank blocks of 1001 elements, and of an odd count whose n blocks pass 9 MiB.
    for (const std::size_t m : {std::size_t{1001}, (std::size_t{9} << 20) / 4 / n + 7}) {
      std::vector<float> in(n * m), mine(m), all(n * m);
      gs::testing::fill_inputs(std::span<float>(in), gs::reduce_op::sum, r, n);
      gs::reduce_scatter(t, std::span<const float>(in), std::span<float>(mine), gs::op::sum, opt);
      wrong += gs::testing::count_wrong(std::span<const float>(mine), gs::reduce_op::sum, n, r * m);
      gs::allgather(t, std::span<const float>(mine), std::span<float>(all), opt);
      wrong += gs::testing::count_wrong(std::span<const float>(all), gs::reduce_op::sum, n);
      h.push_back(gs::testing::fnv1a64(all.data(), all.size() * sizeof(float)));
      for (const std::size_t root : {std::size_t{0}, n - 1}) {
        std::vector<float> v(n * m, -1.0f);
        if (r == root) v = all;
        gs::broadcast(t, std::span<float>(v), root, opt);
        wrong += v != all;
      }
    }
    GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong elements or broadcasts, cut " +
                                 std::to_string(cut));
    GS_CHECK(gs::testbed::same_on_all_ranks(h));
  }
}

GS_MPI_TEST("cluster: the allreducer's buckets over two_level, exact across hosts", 240) {
  if (!even_hosts()) GS_SKIP("two_level needs the same number of ranks on every host");
  two_level t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD);
  std::vector<std::uint64_t> hashes;
  gs::allreducer<two_level, gs::algo::hierarchical<>, gs::fusion::bucket<4 << 20>> ar(t);
  // 40 tensors of 1..300000 floats (about 6 MiB): buckets above and below a piece.
  std::vector<std::vector<float>> g(40);
  std::vector<std::size_t> first(g.size());
  for (std::size_t i = 0, at = 0; i < g.size(); ++i) {
    g[i].resize((i * 104729) % 300000 + 1);
    first[i] = at;
    at += g[i].size();
    ar.add(std::span<float>(g[i]), "g" + std::to_string(i));
  }
  ar.commit(gs::op::avg);
  std::mt19937_64 rng(world_rank() + 7);
  std::vector<std::size_t> order(g.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int step = 0; step < 2; ++step) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      gs::testing::fill_inputs(std::span<float>(g[i]), gs::reduce_op::avg, t.rank(), t.size(),
                               first[i]);
    }
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i : order) ar.ready(i);
    ar.wait();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      wrong += gs::testing::count_wrong(std::span<const float>(g[i]), gs::reduce_op::avg, t.size(),
                                        first[i]);
      hashes.push_back(gs::testing::fnv1a64(g[i].data(), g[i].size() * sizeof(float)));
    }
    GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong in step " + std::to_string(step));
  }
  GS_CHECK(gs::testbed::same_on_all_ranks(hashes));
}

GS_MPI_TEST("cluster: exact sums in pieces across hosts, on the codec's helper thread", 120) {
  // One bucket of 2.2 M floats: 17.6 MB of 64-bit codes, two pieces; across hosts the
  // second is summed on the codec's helper thread while the first decodes. Exact inputs,
  // so every element is the exact sum; flat mpi and two_level alike.
  auto run = [&]<class Tr, class A>(Tr& t, const char* what) {
    gs::allreducer<Tr, A, gs::fusion::bucket<25 << 20>, gs::compress::exact<>> ar(t);
    std::vector<float> g((std::size_t{22} << 20) / 10 + 7), h(1001);
    ar.add(std::span<float>(g), "g");
    ar.add(std::span<float>(h), "h");
    ar.commit(gs::op::sum);
    for (int step = 0; step < 2; ++step) {
      gs::testing::fill_inputs(std::span<float>(g), gs::reduce_op::sum, t.rank(), t.size());
      gs::testing::fill_inputs(std::span<float>(h), gs::reduce_op::sum, t.rank(), t.size(), 5);
      ar.ready(1);
      ar.ready(0);
      ar.wait();
      const std::size_t wrong =
          gs::testing::count_wrong(std::span<const float>(g), gs::reduce_op::sum, t.size()) +
          gs::testing::count_wrong(std::span<const float>(h), gs::reduce_op::sum, t.size(), 5);
      GS_CHECK_MSG(wrong == 0, std::string(what) + ": " + std::to_string(wrong) + " wrong");
      GS_CHECK_MSG(gs::testbed::same_on_all_ranks(
                       {gs::testing::fnv1a64(g.data(), g.size() * sizeof(float))}),
                   std::string(what) + ": ranks differ");
    }
  };
  {
    gs::transport::mpi t(MPI_COMM_WORLD);
    GS_REQUIRE(gs::crosses_network(t));
    run.operator()<gs::transport::mpi, gs::algo::ring>(t, "mpi ring");
  }
  if (even_hosts()) {
    two_level t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD);
    run.operator()<two_level, gs::algo::hierarchical<>>(t, "two_level hierarchical");
  }
}

GS_MPI_TEST("cluster: a timeout names the peer's world rank and host", 60) {
  // Ranks 0 and the last rank (on another host) exchange; the last one never sends.
  gs::transport::mpi t(MPI_COMM_WORLD);
  const std::size_t last = world_size() - 1;
  const auto hosts = every_host();
  if (world_rank() == 0) {
    float x = 0;
    auto r = t.irecv(last, &x, sizeof x, 77);
    const std::string msg =
        GS_CHECK_ERROR(t.wait(r, gs::deadline::after(gs::seconds_d(0.5))), gs::errc::timeout);
    GS_CHECK_MSG(gs::testbed::contains(msg, "(peer " + std::to_string(last) + ")"), msg);
    GS_CHECK_MSG(gs::testbed::contains(msg, "peer " + std::to_string(last) + " on " + hosts[last]),
                 msg);
    GS_CHECK_MSG(gs::testbed::contains(msg, "rank 0 on " + hosts[0]), msg);
  }
  // An inter-node group of two_level: its errors name world ranks too, and the group.
  if (!even_hosts()) return;
  two_level tl = gs::transport::two_level_from_mpi(MPI_COMM_WORLD);
  if (tl.inter().rank() == 0) {
    const std::size_t peer = tl.inter().size() - 1;  // on the last host
    float x = 0;
    auto r = tl.inter().irecv(peer, &x, sizeof x, 78);
    const std::string msg = GS_CHECK_ERROR(
        tl.inter().wait(r, gs::deadline::after(gs::seconds_d(0.5))), gs::errc::timeout);
    const std::size_t peer_world = peer * tl.intra().size() + tl.intra().rank();
    GS_CHECK_MSG(gs::testbed::contains(msg, "(peer " + std::to_string(peer_world) + ")"), msg);
    GS_CHECK_MSG(gs::testbed::contains(msg, "on " + hosts[peer_world]), msg);
    GS_CHECK_MSG(
        gs::testbed::contains(msg, "in a sub-group of " + std::to_string(tl.inter().size())), msg);
  }
  gs::testbed::keep_until_exit(std::move(tl));
  gs::testbed::keep_until_exit(std::move(t));
}
