// SPDX-License-Identifier: Apache-2.0
// broadcast, reduce_scatter and allgather over transport::shm with 1..6 forked processes:
// exact results, every root, counts 0, 1, odd and past one staged piece (several pieces
// through alternating halves), bitwise identity across ranks for broadcast and allgather;
// registered buffers read in place, equal to the staged path; mismatched calls and a NaN
// under check_finite failing every rank by name, the transport usable afterwards.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/ring.hpp>
#include <gradsync/allgather.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/shm.hpp>

#include "expect_records.hpp"
#include "fork_ranks.hpp"
#include "watchdog.hpp"
#include "text.hpp"

namespace gs = gradsync;
using gradsync::testbed::contains;
using gs::testbed::rank_env;

namespace {

template <class T>
T value_of(std::size_t who, std::size_t i) {
  return gs::testing::from_double<T>(static_cast<double>((i * 7 + who * 13) % 201) - 100);
}

template <class T>
void broadcasts(gs::transport::shm& t, rank_env& env) {
  const std::size_t n = t.size(), r = t.rank();
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{1001}, std::size_t{(1 << 20) + 3}}) {
    for (std::size_t root = 0; root < n; ++root) {
      std::vector<T> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = value_of<T>(r == root ? root : n + 1, i);
      gs::broadcast(t, std::span<T>(v), root);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const T want = value_of<T>(root, i);
        wrong += std::memcmp(&want, &v[i], sizeof(T)) != 0;
      }
      env.report("broadcast/" + std::string(gs::dtype_name(gs::dtype_of<T>::value)) + "/" +
                     std::to_string(count) + "/root" + std::to_string(root),
                 wrong, gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
    }
  }
}

template <class T, class Op>
void reduce_scatters(gs::transport::shm& t, rank_env& env) {
  const std::size_t n = t.size(), r = t.rank();
  for (std::size_t m : {std::size_t{0}, std::size_t{1}, std::size_t{1001}, std::size_t{300001}}) {
    std::vector<T> in(n * m), out(m), all(n * m);
    gs::testing::fill_inputs(std::span<T>(in), Op::id, r, n);
    gs::reduce_scatter(t, std::span<const T>(in), std::span<T>(out), Op{});
    std::size_t wrong = gs::testing::count_wrong(std::span<const T>(out), Op::id, n, r * m);
    gs::allgather(t, std::span<const T>(out), std::span<T>(all));
    wrong += gs::testing::count_wrong(std::span<const T>(all), Op::id, n);
    // In place: the output is this rank's block of the input.
    std::vector<T> whole(in);
    gs::reduce_scatter(t, std::span<const T>(whole), std::span<T>(whole.data() + r * m, m), Op{});
    if (m) wrong += std::memcmp(whole.data() + r * m, out.data(), m * sizeof(T)) != 0;
    // In place: this rank's block is the input.
    std::vector<T> again(n * m);
    if (m) std::memcpy(again.data() + r * m, out.data(), m * sizeof(T));
    gs::allgather(t, std::span<const T>(again.data() + r * m, m), std::span<T>(again));
    if (m) wrong += std::memcmp(again.data(), all.data(), n * m * sizeof(T)) != 0;
    env.report("reduce_scatter+allgather/" + std::string(gs::dtype_name(gs::dtype_of<T>::value)) +
                   "/" + std::string(gs::op_name(Op::id)) + "/" + std::to_string(m),
               wrong, gs::testing::fnv1a64(all.data(), all.size() * sizeof(T)));
  }
}

void collectives_on(std::size_t n) {
  gs::testbed::watchdog wd(170, "shm collectives on " + std::to_string(n) + " processes");
  const auto out = gs::testbed::fork_ranks(
      n, gs::testbed::unique_job("coll"),
      [](gs::transport::shm& t, rank_env& env) {
        broadcasts<float>(t, env);
        broadcasts<gs::half>(t, env);
        broadcasts<std::int64_t>(t, env);
        reduce_scatters<float, gs::op::sum_t>(t, env);
        reduce_scatters<gs::bfloat16, gs::op::avg_t>(t, env);
        reduce_scatters<double, gs::op::prod_t>(t, env);
        reduce_scatters<std::int32_t, gs::op::min_t>(t, env);
      },
      {.time_limit = 160, .max_records = 1024, .configure = {}, .while_running = {}});
  std::size_t bad = 0;
  for (std::size_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << out[r].what);
    CHECK(out[r].status == 0);
    REQUIRE(out[r].records.size() == out[0].records.size());
    for (std::size_t i = 0; i < out[r].records.size(); ++i) {
      const auto& a = out[0].records[i];
      const auto& b = out[r].records[i];
      if (b.wrong != 0 || b.hash != a.hash || std::string(a.label) != b.label) {
        if (bad++ < 5) FAIL_CHECK("rank " << r << " " << b.label << ": wrong=" << b.wrong);
      }
    }
  }
  CHECK(bad == 0);
  CHECK(out[0].records.size() == 3 * 4 * n + 4 * 4);
}

// Each collective on ordinary vectors and on heap buffers (shm::allocate) holding the same
// inputs; `plain_rank` keeps ordinary vectors (everyone stages then, or for broadcast when
// it is the root). Reports errors against the exact result, plus 1 if the registered
// result's bits differ from the staged one.
template <class T, class Op>
void registered_case(gs::transport::shm& t, rank_env& env, std::size_t m, std::size_t plain_rank) {
  const std::size_t n = t.size(), r = t.rank();
  const bool reg = r != plain_rank;
  auto heap_or_vector = [&](std::vector<T>& backing, gs::transport::shm::buffer<T>& buf,
                            std::size_t count) -> std::span<T> {
    if (reg) {
      buf = t.allocate<T>(count);
      return buf.span();
    }
    backing.resize(count);
    return backing;
  };
  const std::string tag = std::string(gs::dtype_name(gs::dtype_of<T>::value)) + "/" +
                          std::to_string(m) + (plain_rank < n ? "/mixed" : "/all");
  {  // reduce_scatter, then allgather of its result
    std::vector<T> in(n * m), out(m), all(n * m), b_in, b_out, b_all;
    gs::transport::shm::buffer<T> h_in, h_out, h_all;
    std::span<T> rin = heap_or_vector(b_in, h_in, n * m), rout = heap_or_vector(b_out, h_out, m),
                 rall = heap_or_vector(b_all, h_all, n * m);
    gs::testing::fill_inputs(std::span<T>(in), Op::id, r, n);
    std::copy(in.begin(), in.end(), rin.begin());
    gs::reduce_scatter(t, std::span<const T>(in), std::span<T>(out), Op{});
    gs::reduce_scatter(t, std::span<const T>(rin), rout, Op{});
    std::size_t wrong = gs::testing::count_wrong(std::span<const T>(rout), Op::id, n, r * m);
    wrong += std::memcmp(out.data(), rout.data(), m * sizeof(T)) != 0;
    gs::allgather(t, std::span<const T>(out), std::span<T>(all));
    gs::allgather(t, std::span<const T>(rout), rall);
    wrong += gs::testing::count_wrong(std::span<const T>(rall), Op::id, n);
    wrong += std::memcmp(all.data(), rall.data(), n * m * sizeof(T)) != 0;
    env.report("registered rs+ag/" + tag, wrong,
               gs::testing::fnv1a64(rall.data(), n * m * sizeof(T)));
  }
  for (std::size_t root = 0; root < n; ++root) {  // broadcast from every root
    std::vector<T> backing;
    gs::transport::shm::buffer<T> pad = t.allocate<T>(reg ? root + 1 : 0), buf;  // offsets vary
    std::span<T> v = heap_or_vector(backing, buf, m);
    for (std::size_t i = 0; i < m; ++i) v[i] = value_of<T>(r == root ? root : n + 1, i);
    gs::broadcast(t, v, root);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const T want = value_of<T>(root, i);
      wrong += std::memcmp(&want, &v[i], sizeof(T)) != 0;
    }
    env.report("registered bcast/" + tag + "/root" + std::to_string(root), wrong,
               gs::testing::fnv1a64(v.data(), m * sizeof(T)));
  }
}

void registered_on(std::size_t n, std::size_t plain_rank) {
  gs::testbed::watchdog wd(170, "shm registered collectives on " + std::to_string(n));
  const auto out = gs::testbed::fork_ranks(
      n, gs::testbed::unique_job("collreg"),
      [plain_rank](gs::transport::shm& t, rank_env& env) {
        // 7: inline in the header slot; 300001: several staged pieces, odd.
        for (std::size_t m : {std::size_t{7}, std::size_t{300001}}) {
          registered_case<float, gs::op::sum_t>(t, env, m, plain_rank);
          registered_case<double, gs::op::avg_t>(t, env, m, plain_rank);
          registered_case<std::int32_t, gs::op::max_t>(t, env, m, plain_rank);
        }
      },
      {.time_limit = 160,
       .max_records = 256,
       .configure = [](gs::transport::shm_options& o) { o.heap_bytes = 48 << 20; },
       .while_running = {}});
  for (std::size_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << out[r].what);
    CHECK(out[r].status == 0);
    REQUIRE(out[r].records.size() == 2 * 3 * (1 + n));
    for (std::size_t i = 0; i < out[r].records.size(); ++i) {
      const auto& a = out[0].records[i];
      const auto& b = out[r].records[i];
      INFO(b.label);
      CHECK(b.wrong == 0);
      CHECK(std::string(a.label) == b.label);
      CHECK(b.hash == a.hash);
    }
  }
}

}  // namespace

TEST_CASE("shm collectives: registered buffers are read in place, equal to the staged path") {
  for (std::size_t n : {2, 3, 4}) {
    INFO(n << " processes, every rank registered");
    registered_on(n, n);
  }
  INFO("3 processes, rank 1 with ordinary vectors");
  registered_on(3, 1);
}

TEST_CASE("shm collectives: mismatched calls and a NaN fail every rank by name, then work") {
  gs::testbed::watchdog wd(60, "shm collective mismatches");
  const auto out = gs::testbed::fork_ranks(
      3, gs::testbed::unique_job("collmis"),
      [](gs::transport::shm& t, rank_env& env) {
        const std::size_t r = t.rank(), n = t.size();
        auto expect = [&](const char* label, gs::errc code, const char* part, auto&& call) {
          env.report_error(label, code, part, call);
        };
        expect("broadcast root", gs::errc::mismatch, "rank 2 differs from rank 0 in root 0 vs 1",
               [&] {
                 std::vector<float> v(100);
                 gs::broadcast(t, std::span<float>(v), r == 2 ? 1 : 0);
               });
        expect("large broadcast count", gs::errc::mismatch, "ranks called broadcast with different",
               [&] {
                 std::vector<float> v(r == 1 ? 200001 : 200000);
                 gs::broadcast(t, std::span<float>(v), 0);
               });
        expect("root past the ranks", gs::errc::invalid_argument, "broadcast: root 3 is not a rank",
               [&] {
                 std::vector<float> v(100000);
                 gs::broadcast(t, std::span<float>(v), 3);
               });
        expect("allgather count", gs::errc::mismatch,
               "ranks called allgather with different arguments (1 rank(s)", [&] {
                 const std::size_t m = r == 1 ? 5 : 4;
                 std::vector<float> mine(m), all(n * m);
                 gs::allgather(t, std::span<const float>(mine), std::span<float>(all));
               });
        expect(
            "reduce_scatter op", gs::errc::mismatch, "rank 2 differs from rank 0 in op sum vs max",
            [&] {
              std::vector<float> in(n * 50000), o(50000);
              if (r == 2) {
                gs::reduce_scatter(t, std::span<const float>(in), std::span<float>(o), gs::op::max);
              } else {
                gs::reduce_scatter(t, std::span<const float>(in), std::span<float>(o), gs::op::sum);
              }
            });
        expect("reduce_scatter NaN", gs::errc::non_finite,
               "rank 1 has NaN in its input at element 1234", [&] {
                 std::vector<float> in(n * 1000, 1.0f), o(1000);
                 if (r == 1) in[1234] = std::numeric_limits<float>::quiet_NaN();
                 gs::reduce_scatter(t, std::span<const float>(in), std::span<float>(o), gs::op::sum,
                                    {.check_finite = true});
               });
        // The transport stays usable after every failure above.
        std::vector<std::int32_t> in(n * 333), o(333), all(n * 333);
        gs::testing::fill_inputs(std::span<std::int32_t>(in), gs::reduce_op::sum, r, n);
        gs::reduce_scatter(t, std::span<const std::int32_t>(in), std::span<std::int32_t>(o),
                           gs::op::sum);
        gs::allgather(t, std::span<const std::int32_t>(o), std::span<std::int32_t>(all));
        env.report(
            "after",
            gs::testing::count_wrong(std::span<const std::int32_t>(all), gs::reduce_op::sum, n), 0);
      },
      {.time_limit = 40, .max_records = 16, .configure = {}, .while_running = {}});
  gs::testbed::expect_every_record_right(out, 7);
}

TEST_CASE("shm collectives: 1 process") {
  collectives_on(1);
}
TEST_CASE("shm collectives: 2 processes") {
  collectives_on(2);
}
TEST_CASE("shm collectives: 3 processes") {
  collectives_on(3);
}
TEST_CASE("shm collectives: 4 processes") {
  collectives_on(4);
}
TEST_CASE("shm collectives: 6 processes") {
  collectives_on(6);
}

// 6 processes split two ways at once: by parity ({0,2,4}, {1,3,5}) and into halves with
// keys reversed ({2,1,0}, {5,4,3}). Each rank allreduces on its parity group in one thread
// while it broadcasts on its half in another; then rank 5 stays away from the odd group
// and 1 and 3 time out on it, naming job ranks.
TEST_CASE("shm split: parity and halves at once, exact, errors name the job's ranks") {
  gs::testbed::watchdog wd(100, "shm split");
  constexpr std::size_t n = 6;
  const auto out = gs::testbed::fork_ranks(
      n, gs::testbed::unique_job("split"),
      [](gs::transport::shm& t, rank_env& env) {
        const std::size_t r = t.rank();
        gs::transport::shm parity = t.split(static_cast<int>(r % 2), static_cast<int>(r));
        gs::transport::shm halves = t.split(r < 3 ? 0 : 1, -static_cast<int>(r));
        env.report("layout", 0,
                   parity.size() * 1000 + parity.rank() * 100 + halves.size() * 10 + halves.rank());
        std::size_t wrong = 0;
        std::thread helper([&] {
          for (int it = 0; it < 10; ++it) {
            std::vector<float> v(30001);
            gs::testing::fill_inputs(std::span<float>(v), gs::reduce_op::sum, parity.rank(), 3);
            gs::allreduce<gs::algo::ring>(parity, std::span<float>(v), gs::op::sum);
            wrong += gs::testing::count_wrong(std::span<const float>(v), gs::reduce_op::sum, 3);
          }
        });
        std::size_t bwrong = 0;
        const std::size_t root_job = r < 3 ? 2 : 5;  // rank 0 of each half (key -r)
        for (int it = 0; it < 10; ++it) {
          std::vector<std::int64_t> v(70001);
          for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = static_cast<std::int64_t>(r == root_job ? i * 3 + root_job : 0);
          gs::broadcast(halves, std::span<std::int64_t>(v), 0);
          for (std::size_t i = 0; i < v.size(); ++i)
            bwrong += v[i] != static_cast<std::int64_t>(i * 3 + root_job);
        }
        helper.join();
        env.report("parity allreduce", wrong, 0);
        env.report("halves broadcast", bwrong, 0);
        // The original group still works next to its sub-groups.
        std::vector<double> all(1001);
        gs::testing::fill_inputs(std::span<double>(all), gs::reduce_op::sum, r, n);
        gs::allreduce<gs::algo::ring>(t, std::span<double>(all), gs::op::sum);
        env.report("first group",
                   gs::testing::count_wrong(std::span<const double>(all), gs::reduce_op::sum, n),
                   0);
        if (r == 5) {  // away from the odd group until 1 and 3 have given up
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        } else if (r % 2 == 1) {
          std::vector<float> v(10);
          gs::allreduce<gs::algo::ring>(parity, std::span<float>(v), gs::op::sum,
                                        {.timeout = gs::seconds_d{0.4}});
        }
        (void)t.split(-1, 0);  // refused
      },
      {.time_limit = 90, .max_records = 16, .configure = {}, .while_running = {}});
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CAPTURE(out[r].what);
    REQUIRE(out[r].records.size() == 4);
    const std::size_t half_rank = r < 3 ? 2 - r : 5 - r;
    CHECK(out[r].records[0].hash == 3000 + (r / 2) * 100 + 30 + half_rank);
    CHECK(out[r].records[1].wrong == 0);
    CHECK(out[r].records[2].wrong == 0);
    CHECK(out[r].records[3].wrong == 0);
    if (r == 1 || r == 3) {  // failed on the odd group, naming job ranks
      // Rank 1 times out waiting for 5; rank 3, waiting for 1, may see 1 fail first.
      CHECK((out[r].error_code == static_cast<int>(gs::errc::timeout) ||
             (r == 3 && out[r].error_code == static_cast<int>(gs::errc::peer_lost))));
      CHECK(contains(out[r].what, " on rank " + std::to_string(r)));
      CHECK(contains(out[r].what, "in a sub-group of 3 as rank " + std::to_string(r / 2)));
    } else {
      CHECK(out[r].error_code == static_cast<int>(gs::errc::invalid_argument));
      CHECK(contains(out[r].what, "split color must be >= 0"));
    }
  }
  CHECK(contains(out[1].what, "gradsync timeout on rank 1 (peer 5)"));
}
