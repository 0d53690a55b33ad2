// SPDX-License-Identifier: Apache-2.0
// broadcast, allgather and reduce_scatter on transport::local (threads as ranks) and on
// transport::two_level<local, local>: exact results from exactly representable inputs,
// every root, counts 0, 1, odd and past the chain's threshold, ranks 1..8, bitwise
// identity across ranks; mismatched calls (root, count, type, op) failing every rank
// with a message naming the difference; a bad root refused on every rank; a rank that
// never calls making the others time out naming it; allgather and reduce_scatter in
// place, and buffers that overlap elsewhere refused (on host and device memory).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "two_level_ranks.hpp"
#include "local_outcomes.hpp"
#include "watchdog.hpp"
#include "text.hpp"

namespace gs = gradsync;
using gradsync::testbed::contains;
using gs::transport::local;
using two_level = gs::transport::two_level<local, local>;

namespace {

const gs::call_options quick{.timeout = gs::seconds_d{20}};

using gs::testbed::run_catching;

/// Root `root`'s value at element i (exact in every element type), and a different one
/// that the other ranks start with.
template <class T>
T root_value(std::size_t root, std::size_t i) {
  return gs::testing::from_double<T>(static_cast<double>((i * 7 + root * 13) % 201) - 100);
}

/// Broadcast over `t` (any transport of n ranks, rank() its global rank) from every root:
/// adds to `wrong` the elements that differ from the root's, and to `hashes` one hash
/// per (root, count).
template <class T, class Tr>
void broadcast_cases(Tr& t, std::size_t& wrong, std::vector<std::uint64_t>& hashes) {
  const std::size_t n = t.size();
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}, std::size_t{70001}}) {
    for (std::size_t root = 0; root < n; ++root) {
      std::vector<T> v(count);
      for (std::size_t i = 0; i < count; ++i) {
        v[i] = t.rank() == root ? root_value<T>(root, i) : root_value<T>(root + 1, i);
      }
      gs::broadcast(t, std::span<T>(v), root, quick);
      for (std::size_t i = 0; i < count; ++i) {
        const T want = root_value<T>(root, i);
        wrong += std::memcmp(&want, &v[i], sizeof(T)) != 0;
      }
      hashes.push_back(gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
    }
  }
}

/// reduce_scatter of n blocks of m elements: rank r's output must be block r of the exact
/// reduction. Adds the wrong elements to `wrong`.
template <class T, class Op, class Tr>
void reduce_scatter_cases(Tr& t, std::size_t& wrong) {
  const std::size_t n = t.size(), r = t.rank();
  for (std::size_t m :
       {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1001}, std::size_t{40000}}) {
    std::vector<T> in(n * m), out(m);
    gs::testing::fill_inputs(std::span<T>(in), Op::id, r, n);
    gs::reduce_scatter(t, std::span<const T>(in), std::span<T>(out), Op{}, quick);
    wrong += gs::testing::count_wrong(std::span<const T>(out), Op::id, n, r * m);
  }
}

/// allgather of m elements per rank: every rank's block, in rank order.
template <class T, class Tr>
void allgather_cases(Tr& t, std::size_t& wrong, std::vector<std::uint64_t>& hashes) {
  const std::size_t n = t.size();
  for (std::size_t m : {std::size_t{0}, std::size_t{1}, std::size_t{333}, std::size_t{20001}}) {
    std::vector<T> mine(m), all(n * m);
    for (std::size_t i = 0; i < m; ++i) mine[i] = root_value<T>(t.rank(), i);
    gs::allgather(t, std::span<const T>(mine), std::span<T>(all), quick);
    for (std::size_t q = 0; q < n; ++q) {
      for (std::size_t i = 0; i < m; ++i) {
        const T want = root_value<T>(q, i);
        wrong += std::memcmp(&want, &all[q * m + i], sizeof(T)) != 0;
      }
    }
    hashes.push_back(gs::testing::fnv1a64(all.data(), all.size() * sizeof(T)));
  }
}

template <class Tr>
void every_collective(Tr& t, std::size_t& wrong, std::vector<std::uint64_t>& hashes) {
  broadcast_cases<float>(t, wrong, hashes);
  broadcast_cases<double>(t, wrong, hashes);
  broadcast_cases<gs::half>(t, wrong, hashes);
  broadcast_cases<gs::bfloat16>(t, wrong, hashes);
  broadcast_cases<std::int32_t>(t, wrong, hashes);
  broadcast_cases<std::int64_t>(t, wrong, hashes);
  reduce_scatter_cases<float, gs::op::sum_t>(t, wrong);
  reduce_scatter_cases<float, gs::op::avg_t>(t, wrong);
  reduce_scatter_cases<double, gs::op::prod_t>(t, wrong);
  reduce_scatter_cases<gs::half, gs::op::max_t>(t, wrong);
  reduce_scatter_cases<gs::bfloat16, gs::op::avg_t>(t, wrong);
  reduce_scatter_cases<std::int32_t, gs::op::min_t>(t, wrong);
  reduce_scatter_cases<std::int64_t, gs::op::sum_t>(t, wrong);
  allgather_cases<float>(t, wrong, hashes);
  allgather_cases<gs::bfloat16>(t, wrong, hashes);
  allgather_cases<std::int64_t>(t, wrong, hashes);
}

}  // namespace

TEST_CASE("collectives: exact and bitwise identical on 1..8 local ranks, every root") {
  for (std::size_t n = 1; n <= 8; ++n) {
    CAPTURE(n);
    gs::testbed::watchdog wd(120, "collectives on " + std::to_string(n) + " local ranks");
    std::vector<std::size_t> wrong(n);
    std::vector<std::vector<std::uint64_t>> hashes(n);
    gs::transport::run_local(
        n, [&](local& t) { every_collective(t, wrong[t.rank()], hashes[t.rank()]); });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(wrong[r] == 0);
      CHECK(hashes[r] == hashes[0]);
    }
    CHECK(hashes[0].size() == 6 * 5 * n + 3 * 4);
  }
}

TEST_CASE("collectives: a 4 MiB broadcast and reduce_scatter over 5 ranks") {
  gs::testbed::watchdog wd(120, "large collectives");
  constexpr std::size_t n = 5, big = (std::size_t{1} << 20) + 3;
  std::vector<std::size_t> wrong(n);
  gs::transport::run_local(n, [&](local& t) {
    std::vector<float> v(big);
    for (std::size_t i = 0; i < big; ++i) v[i] = root_value<float>(t.rank() == 3 ? 3 : 9, i);
    gs::broadcast(t, std::span<float>(v), 3, quick);
    for (std::size_t i = 0; i < big; ++i) wrong[t.rank()] += v[i] != root_value<float>(3, i);
    std::vector<std::int32_t> in(n * big), out(big);
    gs::testing::fill_inputs(std::span<std::int32_t>(in), gs::reduce_op::sum, t.rank(), n);
    gs::reduce_scatter(t, std::span<const std::int32_t>(in), std::span<std::int32_t>(out),
                       gs::op::sum, quick);
    wrong[t.rank()] += gs::testing::count_wrong(std::span<const std::int32_t>(out),
                                                gs::reduce_op::sum, n, t.rank() * big);
  });
  for (std::size_t r = 0; r < n; ++r) CHECK(wrong[r] == 0);
}

/// A device transport with no GPU, for the buffer rule of the device paths alone:
/// transport::local's threads, its memory called device (a device_span carries only
/// pointers), and native collectives that, like a device library's, check nothing: they
/// copy the input aside and run gradsync's host collective on the copies.
struct unchecked_device : local {
  static constexpr gs::memory_space memory = gs::memory_space::device;
  static constexpr gs::transport_traits traits{
      .watches_stalls = true, .aborts = true, .native_collectives = true, .splits = true};
  explicit unchecked_device(local&& l) : local(std::move(l)) {}
  void synchronize(gs::deadline) {}
  void broadcast_native(std::byte* p, std::size_t bytes, std::size_t root,
                        const gs::call_context&) {
    gs::broadcast(host(), std::span<std::int8_t>(reinterpret_cast<std::int8_t*>(p), bytes), root,
                  quick);
  }
  void allgather_native(const std::byte* in, std::byte* out, std::size_t bytes,
                        const gs::call_context&) {
    const std::vector<std::int8_t> mine(reinterpret_cast<const std::int8_t*>(in),
                                        reinterpret_cast<const std::int8_t*>(in) + bytes);
    std::vector<std::int8_t> all(bytes * size());
    gs::allgather(host(), std::span<const std::int8_t>(mine), std::span<std::int8_t>(all), quick);
    std::memcpy(out, all.data(), all.size());
  }
  template <class T, class Op>
  void reduce_scatter_native(const T* in, T* out, std::size_t count, Op op,
                             const gs::call_context&) {
    const std::vector<T> whole(in, in + count * size());
    std::vector<T> mine(count);
    gs::reduce_scatter(host(), std::span<const T>(whole), std::span<T>(mine), op, quick);
    std::memcpy(out, mine.data(), count * sizeof(T));
  }

 private:
  local& host() { return *this; }
};

/// Allgathers rank r's block (value 1000 x r + i) over `t`, its input at out[slot x count]
/// of the output (slot == rank: in place): the elements that differ from the exact result.
/// A device transport gets device_spans of the same memory.
template <class Tr>
std::size_t allgather_from_slot(Tr& t, std::size_t count, std::size_t slot) {
  const std::size_t n = t.size();
  std::vector<std::int32_t> out(n * count, -7);
  for (std::size_t i = 0; i < count; ++i) {
    out[slot * count + i] = static_cast<std::int32_t>(1000 * t.rank() + i);
  }
  if constexpr (gs::device_transport<Tr>) {
    gs::allgather(t, gs::device_span<const std::int32_t>(out.data() + slot * count, count),
                  gs::device_span<std::int32_t>(out.data(), out.size()), quick);
    t.synchronize(gs::deadline::after(gs::seconds_d{20}));
  } else {
    gs::allgather(t, std::span<const std::int32_t>(out.data() + slot * count, count),
                  std::span<std::int32_t>(out), quick);
  }
  std::size_t wrong = 0;
  for (std::size_t q = 0; q < n; ++q) {
    for (std::size_t i = 0; i < count; ++i) {
      wrong += out[q * count + i] != static_cast<std::int32_t>(1000 * q + i);
    }
  }
  return wrong;
}

/// Reduce-scatters n blocks of `count` (testing::fill_inputs, op::sum) over `t` into the
/// input's own block `slot` (slot == rank: in place): the elements of it that are wrong.
template <class Tr>
std::size_t reduce_scatter_into_slot(Tr& t, std::size_t count, std::size_t slot) {
  const std::size_t n = t.size();
  std::vector<std::int32_t> in(n * count);
  gs::testing::fill_inputs(std::span<std::int32_t>(in), gs::reduce_op::sum, t.rank(), n);
  const std::span<std::int32_t> out(in.data() + slot * count, count);
  if constexpr (gs::device_transport<Tr>) {
    gs::reduce_scatter(t, gs::device_span<const std::int32_t>(in.data(), in.size()),
                       gs::device_span<std::int32_t>(out.data(), count), gs::op::sum, quick);
    t.synchronize(gs::deadline::after(gs::seconds_d{20}));
  } else {
    gs::reduce_scatter(t, std::span<const std::int32_t>(in), out, gs::op::sum, quick);
  }
  return gs::testing::count_wrong(std::span<const std::int32_t>(out), gs::reduce_op::sum, n,
                                  t.rank() * count);
}

/// The buffer rule of allgather and reduce_scatter: `into_slot(t, count, slot)` makes one
/// call whose two buffers share block `slot` and returns its wrong elements. In place
/// (slot == rank) it is exact on 3 local ranks (each given to `into_slot` as `as(t)`);
/// from the next rank's block every rank fails with invalid_argument and `refusal` +
/// "(rank r".
template <class As, class F>
void check_flat_block_rule(const std::string& refusal, As&& as, F&& into_slot) {
  constexpr std::size_t n = 3;
  for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{70001}}) {
    CAPTURE(count);
    std::vector<std::size_t> wrong(n, 99);
    auto out = run_catching(n, [&](local& l) {
      decltype(auto) t = as(l);
      wrong[t.rank()] = into_slot(t, count, t.rank());
    });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(out[r].what);
      CHECK_FALSE(out[r].threw);
      CHECK(wrong[r] == 0);
    }
    // The next rank's block: the algorithms would overwrite data they have yet to read
    // (allgather gave silently wrong results before the check).
    out = run_catching(n, [&](local& l) {
      decltype(auto) t = as(l);
      into_slot(t, count, (t.rank() + 1) % n);
    });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(out[r].what);
      CHECK(out[r].code == gs::errc::invalid_argument);
      CHECK(contains(out[r].what, refusal + " (rank " + std::to_string(r)));
    }
  }
}

/// check_flat_block_rule on local, and in place on 2 x 2 levels.
template <class F>
void check_block_rule(const std::string& refusal, F&& into_slot) {
  check_flat_block_rule(
      refusal, [](local& l) -> local& { return l; }, into_slot);
  std::vector<std::size_t> wrong(4, 99);
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    wrong[t.rank()] = into_slot(t, 1001, t.rank());
  });
  for (std::size_t r = 0; r < 4; ++r) {
    CHECK(errors[r] == "");
    CHECK(wrong[r] == 0);
  }
}

TEST_CASE("allgather: in place at this rank's block; any other overlap refused on every rank") {
  gs::testbed::watchdog wd(60, "allgather overlap");
  check_block_rule("allgather: the input overlaps the output other than at this rank's block",
                   [](auto& t, std::size_t count, std::size_t slot) {
                     return allgather_from_slot(t, count, slot);
                   });
}

TEST_CASE("reduce_scatter: in place at this rank's block; any other overlap refused") {
  gs::testbed::watchdog wd(60, "reduce_scatter overlap");
  check_block_rule("reduce_scatter: the output overlaps the input other than at this rank's block",
                   [](auto& t, std::size_t count, std::size_t slot) {
                     return reduce_scatter_into_slot(t, count, slot);
                   });
}

TEST_CASE("allgather and reduce_scatter on device memory: the same buffer rule as on host") {
  gs::testbed::watchdog wd(60, "device overlap");
  const auto as_device = [](local& l) { return unchecked_device(std::move(l)); };
  check_flat_block_rule("allgather: the input overlaps the output other than at this rank's block",
                        as_device, [](unchecked_device& t, std::size_t count, std::size_t slot) {
                          return allgather_from_slot(t, count, slot);
                        });
  // No check here once let a shifted output overwrite input the device had yet to read.
  check_flat_block_rule(
      "reduce_scatter: the output overlaps the input other than at this rank's block", as_device,
      [](unchecked_device& t, std::size_t count, std::size_t slot) {
        return reduce_scatter_into_slot(t, count, slot);
      });
}

TEST_CASE("collectives over two_level<local, local>: exact on every shape and root") {
  gs::testbed::watchdog wd(240, "two-level collectives");
  const std::size_t shapes[][2] = {{2, 2}, {3, 2}, {2, 3}, {1, 4}, {4, 1}, {1, 1}};
  for (const auto& s : shapes) {
    const std::size_t nodes = s[0], per_node = s[1], n = nodes * per_node;
    CAPTURE(nodes);
    CAPTURE(per_node);
    std::vector<std::size_t> wrong(n);
    std::vector<std::vector<std::uint64_t>> hashes(n);
    const auto errors = gs::testbed::run_two_level_shape(nodes, per_node, [&](local a, local b) {
      two_level t(std::move(a), std::move(b));
      every_collective(t, wrong[t.rank()], hashes[t.rank()]);
    });
    for (std::size_t r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(errors[r] == "");
      CHECK(wrong[r] == 0);
      CHECK(hashes[r] == hashes[0]);
    }
  }
}

TEST_CASE("collectives: different arguments fail every rank, naming the difference") {
  constexpr std::size_t n = 4;
  gs::testbed::watchdog wd(60, "collective mismatches");
  SUBCASE("broadcast root") {
    auto out = run_catching(n, [](local& t) {
      std::vector<float> v(100, 1.0f);
      gs::broadcast(t, std::span<float>(v), t.rank() == 2 ? 1 : 0, quick);
    });
    for (const auto& o : out) {
      CAPTURE(o.what);
      CHECK(o.code == gs::errc::mismatch);
      CHECK(contains(o.what, "ranks called broadcast with different arguments"));
      CHECK(contains(o.what, "rank 2 differs from rank 0 in root 0 vs 1"));
    }
  }
  SUBCASE("broadcast count") {
    auto out = run_catching(n, [](local& t) {
      std::vector<float> v(t.rank() == 3 ? 99 : 100, 1.0f);
      gs::broadcast(t, std::span<float>(v), 0, quick);
    });
    for (const auto& o : out) {
      CAPTURE(o.what);
      CHECK(o.code == gs::errc::mismatch);
      CHECK(contains(o.what, "rank 3 differs from rank 0 in count 100 vs 99"));
    }
  }
  SUBCASE("reduce_scatter type and op") {
    auto out = run_catching(n, [](local& t) {
      std::vector<float> in(4 * 10, 1.0f), out(10);
      std::vector<double> din(4 * 10, 1.0), dout(10);
      if (t.rank() == 1) {
        gs::reduce_scatter(t, std::span<const double>(din), std::span<double>(dout), gs::op::sum,
                           quick);
      } else if (t.rank() == 2) {
        gs::reduce_scatter(t, std::span<const float>(in), std::span<float>(out), gs::op::max,
                           quick);
      } else {
        gs::reduce_scatter(t, std::span<const float>(in), std::span<float>(out), gs::op::sum,
                           quick);
      }
    });
    for (const auto& o : out) {
      CAPTURE(o.what);
      CHECK(o.code == gs::errc::mismatch);
      CHECK(contains(o.what, "ranks called reduce_scatter with different arguments (2 rank(s)"));
      CHECK(contains(o.what, "rank 1 differs from rank 0 in element type float32 vs float64"));
      CHECK(contains(o.what, "rank 2 differs from rank 0 in op sum vs max"));
    }
  }
  SUBCASE("a root that is no rank") {
    auto out = run_catching(n, [](local& t) {
      std::vector<std::int32_t> v(8);
      gs::broadcast(t, std::span<std::int32_t>(v), 4, quick);
    });
    for (const auto& o : out) {
      CAPTURE(o.what);
      CHECK(o.code == gs::errc::invalid_argument);
      CHECK(contains(o.what, "broadcast: root 4 is not a rank of this transport (4 ranks: 0..3)"));
    }
  }
  SUBCASE("reduce_scatter sizes") {
    auto out = run_catching(n, [](local& t) {
      std::vector<float> in(4 * 10 + 1), o(10);
      gs::reduce_scatter(t, std::span<const float>(in), std::span<float>(o), gs::op::sum, quick);
    });
    for (const auto& o : out) {
      CHECK(o.code == gs::errc::invalid_argument);
      CHECK(contains(o.what, "the input has 41 elements; it needs ranks x output = 4 x 10"));
    }
  }
}

TEST_CASE("collectives over two_level: a different root or count on one rank fails every rank") {
  gs::testbed::watchdog wd(60, "two-level collective mismatch");
  const auto errors = gs::testbed::run_two_level_shape(2, 2, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    std::vector<float> v(64, 1.0f);
    gs::broadcast(t, std::span<float>(v), t.rank() == 3 ? 2 : 0, quick);
  });
  for (std::size_t r = 0; r < errors.size(); ++r) {
    CAPTURE(errors[r]);
    CHECK(contains(errors[r], "broadcast with different arguments"));
  }
  CHECK(contains(errors[2], "rank 3 differs from rank 2 in root 0 vs 2"));
  CHECK(contains(errors[0], "the ranks of another node called broadcast with different"));
  // The same for an allgather whose count differs on one rank.
  const auto gather_errors = gs::testbed::run_two_level_shape(2, 2, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    const std::size_t m = t.rank() == 3 ? 5 : 4;
    std::vector<float> mine(m, 1.0f), all(4 * m);
    gs::allgather(t, std::span<const float>(mine), std::span<float>(all), quick);
  });
  for (std::size_t r = 0; r < gather_errors.size(); ++r) {
    CAPTURE(gather_errors[r]);
    CHECK(contains(gather_errors[r], "allgather with different arguments"));
  }
  CHECK(contains(gather_errors[2], "rank 3 differs from rank 2 in count 4 vs 5"));
}

TEST_CASE("collectives: a rank that never calls makes the others time out naming it") {
  gs::testbed::watchdog wd(60, "collective timeouts");
  constexpr std::size_t n = 3, absent = 2;
  std::atomic<std::size_t> finished{0};
  const auto start = std::chrono::steady_clock::now();
  auto out = run_catching(n, [&](local& t) {
    if (t.rank() == absent) {
      while (finished.load() < n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    std::vector<float> v(1000, 1.0f);
    try {
      gs::broadcast(t, std::span<float>(v), 0, {.timeout = gs::seconds_d{0.3}});
    } catch (...) {
      ++finished;
      throw;
    }
    ++finished;
  });
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(took < 5.0);
  for (std::size_t r = 0; r < n - 1; ++r) {
    CAPTURE(out[r].what);
    CHECK(out[r].code == gs::errc::timeout);
    CHECK(contains(out[r].what, "(peer 2)"));
    CHECK(contains(out[r].what, "on rank " + std::to_string(r)));
  }
}

TEST_CASE("local split: parity and halves, two groups at once per rank, errors name first ranks") {
  gs::testbed::watchdog wd(60, "local split");
  constexpr std::size_t n = 6;
  std::vector<std::size_t> wrong(n), sizes(n), ranks(n);
  std::vector<std::string> late(n);
  std::atomic<int> timed_out{0};
  gs::transport::run_local(n, [&](local& t) {
    const std::size_t r = t.rank();
    local parity = t.split(static_cast<int>(r % 2), static_cast<int>(r));  // {0,2,4} {1,3,5}
    local halves = t.split(r < 3 ? 0 : 1, -static_cast<int>(r));           // reversed order
    sizes[r] = parity.size() * 10 + halves.size();
    ranks[r] = parity.rank() * 10 + halves.rank();
    // The two groups progress at the same time: allreduces on one thread, broadcasts on
    // another, in each rank.
    std::thread helper([&] {
      for (int it = 0; it < 20; ++it) {
        std::vector<float> v(3001);
        gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, parity.rank(), 3);
        gs::allreduce<gs::algo::ring>(parity, std::span<float>(v), gs::op::sum, quick);
        wrong[r] += gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, 3);
      }
    });
    for (int it = 0; it < 20; ++it) {
      std::vector<std::int64_t> v(70001);
      const std::size_t root_global = r < 3 ? 2 : 5;  // halves' rank 0 (key -r)
      for (std::size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<std::int64_t>(r == root_global ? i * 3 + root_global : 0);
      }
      gs::broadcast(halves, std::span<std::int64_t>(v), 0, quick);
      for (std::size_t i = 0; i < v.size(); ++i) {
        wrong[r] += v[i] != static_cast<std::int64_t>(i * 3 + root_global);
      }
    }
    helper.join();
    // Rank 5 never calls on the odd group (and stays, so it does not leave it): 1 and 3
    // time out, naming ranks by their numbers in the first group.
    if (r == 5) {
      while (timed_out.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } else if (r % 2 == 1) {
      std::vector<float> v(10);
      try {
        gs::allreduce<gs::algo::ring>(parity, std::span<float>(v), gs::op::sum,
                                      {.timeout = gs::seconds_d{0.3}});
      } catch (const gs::error& e) {
        late[r] = e.what();
      }
      ++timed_out;
    }
    const std::string m = [&] {
      try {
        (void)t.split(-1, 0);
      } catch (const gs::error& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    CHECK(contains(m, "split color must be >= 0"));
  });
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(wrong[r] == 0);
    CHECK(sizes[r] == 33);
    CHECK(ranks[r] == (r / 2) * 10 + (r < 3 ? 2 - r : 5 - r));
  }
  for (std::size_t r : {std::size_t{1}, std::size_t{3}}) {
    CAPTURE(late[r]);
    CHECK(contains(late[r], "gradsync timeout on rank " + std::to_string(r)));
    CHECK(contains(late[r], "in a sub-group of 3 as rank " + std::to_string(r / 2)));
  }
  // Rank 3 waits for 5 (its right neighbour in the odd group's ring) or for 1 waiting for 5.
  CHECK((contains(late[3], "(peer 5)") || contains(late[1], "(peer 5)")));
}

TEST_CASE("process_set: overlapping sets at once, list order, a rank in none, bad lists") {
  gs::testbed::watchdog wd(60, "process_set");
  constexpr std::size_t n = 6;
  // a = {4, 1, 3} (ranked in list order), b = {0, 1, 2}; rank 1 in both, rank 5 in none.
  std::vector<std::size_t> wrong(n, 99), layout(n), outside(n);
  gs::transport::run_local(n, [&](local& t) {
    const std::size_t r = t.rank();
    gs::process_set<local> a(t, {4, 1, 3});
    gs::process_set<local> b(t, {0, 1, 2});
    layout[r] = (a.contains() ? 10 + a.transport().rank() : 0) * 100 +
                (b.contains() ? 10 + b.transport().rank() : 0);
    std::size_t bad = 0;
    auto on = [&](gs::process_set<local>& s) {  // exact sums over the set's ranks
      for (int it = 0; it < 10; ++it) {
        std::vector<std::int32_t> v(10007);
        gs::testing::fill_inputs(std::span<std::int32_t>(v), gs::reduce_op::sum,
                                 s.transport().rank(), s.size());
        gs::allreduce<gs::algo::ring>(s.transport(), std::span<std::int32_t>(v), gs::op::sum,
                                      quick);
        bad += gs::testing::count_wrong(std::span<const std::int32_t>(v), gs::reduce_op::sum,
                                        s.size());
      }
    };
    std::size_t bad_b = 0;
    std::thread helper([&] {  // b progresses on another thread while a runs on this one
      if (!b.contains()) return;
      for (int it = 0; it < 10; ++it) {
        std::vector<float> v(3001);
        gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, b.transport().rank(), 3);
        gs::allreduce<gs::algo::tree>(b.transport(), std::span<float>(v), gs::op::sum, quick);
        bad_b += gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, 3);
      }
    });
    if (a.contains()) on(a);
    helper.join();
    wrong[r] = bad + bad_b;
    if (!a.contains()) {
      try {
        (void)a.transport();
      } catch (const gs::error& e) {
        outside[r] = e.code() == gs::errc::invalid_argument &&
                     contains(e.what(), "this rank is not in the set");
      }
    }
  });
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(wrong[r] == 0);
  }
  CHECK(layout == std::vector<std::size_t>{10, 1111, 12, 1200, 1000, 0});
  CHECK(outside == std::vector<std::size_t>{1, 0, 1, 0, 0, 1});

  // Rank 2 passes another list: every rank fails, naming it.
  const auto other = gs::testbed::run_catching(4, [](local& t) {
    gs::process_set<local> s(
        t, t.rank() == 2 ? std::vector<std::size_t>{0, 2} : std::vector<std::size_t>{0, 1});
  });
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(other[r].what);
    CHECK(other[r].code == gs::errc::mismatch);
    CHECK(contains(other[r].what, "process_set: rank(s) 2 passed another list of ranks"));
  }
  // A rank listed twice, or one out of range: invalid_argument on every rank.
  const auto twice = gs::testbed::run_catching(3, [](local& t) {
    gs::process_set<local> s(t, {0, 2, 0});
  });
  const auto range = gs::testbed::run_catching(3, [](local& t) {
    gs::process_set<local> s(t, {1, 3});
  });
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(twice[r].code == gs::errc::invalid_argument);
    CHECK(contains(twice[r].what, "rank 0 is listed twice"));
    CHECK(range[r].code == gs::errc::invalid_argument);
    CHECK(contains(range[r].what, "rank 3 is out of range for 3 ranks"));
  }
}

TEST_CASE("two_level split: by local parity and by node at once, node-major order, bad layouts") {
  gs::testbed::watchdog wd(60, "two_level split");
  constexpr std::size_t nodes = 2, per_node = 4, n = nodes * per_node;
  std::vector<std::size_t> wrong(n, 99), shape(n);
  std::vector<std::vector<std::int64_t>> order(n), node_order(n);
  auto errors = gs::testbed::run_two_level_shape(nodes, per_node, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    const std::size_t g = t.rank(), node = g / per_node, li = g % per_node;
    // Colour = local parity, keys highest rank first: node 1 (smaller keys) comes first
    // and local index 2 before 0, so colour 0 is numbered 6, 4, 2, 0.
    two_level parity = t.split(static_cast<int>(li % 2), -static_cast<int>(g));
    two_level halves = t.split(static_cast<int>(node), static_cast<int>(g));  // one node each
    shape[g] = parity.inter().size() * 1000 + parity.intra().size() * 100 +
               halves.inter().size() * 10 + halves.intra().size();
    std::size_t bad = 0;
    std::thread helper([&] {  // the halves progress on another thread meanwhile
      for (int it = 0; it < 10; ++it) {
        std::vector<float> v(3001);
        gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, halves.rank(), 4);
        gs::allreduce<gs::algo::hierarchical<>>(halves, std::span<float>(v), gs::op::sum, quick);
        bad += gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, 4);
      }
      const std::int64_t mine = static_cast<std::int64_t>(g);
      node_order[g].resize(4);
      gs::allgather(halves, std::span<const std::int64_t>(&mine, 1),
                    std::span<std::int64_t>(node_order[g]), quick);
    });
    std::size_t bad_p = 0;
    for (int it = 0; it < 10; ++it) {
      std::vector<std::int32_t> v(10007);
      gs::testing::fill_inputs(std::span<std::int32_t>(v), gs::reduce_op::sum, parity.rank(), 4);
      gs::allreduce<gs::algo::hierarchical<>>(parity, std::span<std::int32_t>(v), gs::op::sum,
                                              quick);
      bad_p += gs::testing::count_wrong(std::span<const std::int32_t>(v), gs::reduce_op::sum, 4);
    }
    const std::int64_t mine = static_cast<std::int64_t>(g);
    order[g].resize(4);
    gs::allgather(parity, std::span<const std::int64_t>(&mine, 1),
                  std::span<std::int64_t>(order[g]), quick);
    helper.join();
    wrong[g] = bad + bad_p;
  });
  for (std::size_t g = 0; g < n; ++g) {
    CAPTURE(g);
    CHECK(errors[g] == "");
    CHECK(wrong[g] == 0);
    CHECK(shape[g] == 2214);  // parity: 2 nodes x 2; halves: 1 node x 4
    CHECK(order[g] == (g % 2 == 0 ? std::vector<std::int64_t>{6, 4, 2, 0}
                                  : std::vector<std::int64_t>{7, 5, 3, 1}));
    CHECK(node_order[g] ==
          (g < 4 ? std::vector<std::int64_t>{0, 1, 2, 3} : std::vector<std::int64_t>{4, 5, 6, 7}));
  }

  // Layouts the two levels cannot link fail every rank alike, naming the colour and ranks.
  auto split_error = [&](auto color_of) {
    return gs::testbed::run_two_level_shape(nodes, per_node, [&](local a, local b) {
      two_level t(std::move(a), std::move(b));
      (void)t.split(color_of(t.rank()), 0);
    });
  };
  errors = split_error([](std::size_t g) { return g == 0 || g == 5 ? 1 : 0; });
  for (std::size_t g = 0; g < n; ++g) {
    CAPTURE(errors[g]);
    CHECK(contains(errors[g],
                   "two_level split: the ranks of color 1 sit at different local "
                   "indices on different nodes (rank 0 is local index 0 on node 0, "
                   "rank 5 is local index 1 on node 1"));
  }
  errors = split_error([](std::size_t g) { return g < 3 ? 1 : 0; });
  for (std::size_t g = 0; g < n; ++g) {
    CAPTURE(errors[g]);
    CHECK(contains(errors[g],
                   "the ranks of color 0 fill their nodes unevenly (node 0 holds "
                   "rank 3, node 1 holds ranks 4, 5, 6, 7)"));
  }
  errors = split_error([](std::size_t g) { return g == 7 ? -1 : 0; });
  CHECK(contains(errors[7], "split color must be >= 0"));
}

TEST_CASE("process_set over two_level: list order inside a node, one rank per node, bad lists") {
  gs::testbed::watchdog wd(60, "process_set two_level");
  constexpr std::size_t n = 8;
  std::vector<std::size_t> wrong(n, 99), layout(n);
  auto errors = gs::testbed::run_two_level_shape(2, 4, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    const std::size_t g = t.rank();
    gs::process_set<two_level> one_node(t, {5, 4, 7});  // node 1, list order inside it
    gs::process_set<two_level> per_node(t, {1, 5});     // local index 1 of each node
    layout[g] = (one_node.contains() ? 10 + one_node.transport().rank() : 0) * 100 +
                (per_node.contains() ? 10 + per_node.transport().rank() : 0);
    std::size_t bad = 0;
    for (auto* s : {&one_node, &per_node}) {
      if (!s->contains()) continue;
      std::vector<double> v(5003);
      gs::testing::fill_inputs(std::span<double>(v), gs::reduce_op::sum, s->transport().rank(),
                               s->size());
      gs::allreduce<gs::algo::hierarchical<>>(s->transport(), std::span<double>(v), gs::op::sum,
                                              quick);
      bad += gs::testing::count_wrong(std::span<const double>(v), gs::reduce_op::sum, s->size());
    }
    wrong[g] = bad;
  });
  for (std::size_t g = 0; g < n; ++g) {
    CAPTURE(g);
    CHECK(errors[g] == "");
    CHECK(wrong[g] == 0);
  }
  CHECK(layout == std::vector<std::size_t>{0, 10, 0, 0, 1100, 1011, 0, 1200});

  // {0, 4, 1, 5} would be numbered 0, 1, 4, 5 (node by node): every rank refuses it,
  // naming the first rank out of place (1, listed third).
  errors = gs::testbed::run_two_level_shape(2, 4, [&](local a, local b) {
    two_level t(std::move(a), std::move(b));
    gs::process_set<two_level> s(t, {0, 4, 1, 5});
  });
  for (std::size_t g = 0; g < n; ++g) {
    CAPTURE(errors[g]);
    CHECK(contains(errors[g],
                   "process_set: this transport numbers the set otherwise than the "
                   "list (rank 1 would not be rank 2 of the set); a two_level"));
  }
}
