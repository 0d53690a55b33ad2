// SPDX-License-Identifier: Apache-2.0
// Registered buffers of transport::shm (shm::allocate, the per-rank heap): direct
// two-shot, and one-shot past its inline size, read peers' vectors in place when every
// rank passes one. Results must be exact, identical on every rank, and bitwise equal to
// the staged path's; a rank that passes an ordinary vector sends everyone down the staged
// path; the heap's limits and a heap-size mismatch are reported by name.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <gradsync/algo/auto_select.hpp>
#include <gradsync/algo/direct.hpp>
#include <gradsync/algo/ring.hpp>
#include <gradsync/allgather.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/shm.hpp>

#include "fork_ranks.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using gs::testbed::rank_env;
using gs::testbed::rank_outcome;

namespace {

constexpr std::size_t heap_bytes = 48 << 20;

// Runs A on a registered buffer and on an ordinary copy of the same inputs; reports the
// registered result's errors (plus 1 if its bits differ from the staged result).
template <class A, class T, class Op>
void compare_case(gs::transport::shm& t, rank_env& env, std::size_t count, bool register_it) {
  std::vector<T> plain(count);
  gs::testing::fill_inputs(std::span<T>(plain), Op::id, t.rank(), t.size());
  auto reg = t.allocate<T>(register_it ? count : 0);
  std::vector<T> other;  // the "registered" side when this rank does not register
  std::span<T> mine = reg.span();
  if (!register_it) {
    other = plain;
    mine = other;
  } else {
    std::copy(plain.begin(), plain.end(), reg.data());
  }
  gs::allreduce<A>(t, std::span<T>(plain), Op{});
  gs::allreduce<A>(t, mine, Op{});
  std::uint64_t wrong = gs::testing::count_wrong(std::span<const T>(mine), Op::id, t.size());
  const std::uint64_t h = gs::testing::fnv1a64(mine.data(), count * sizeof(T));
  if (h != gs::testing::fnv1a64(plain.data(), count * sizeof(T))) ++wrong;
  env.report(std::string(A::name) + "/" + std::string(gs::dtype_name(gs::dtype_of<T>::value)) +
                 "/" + std::string(gs::op_name(Op::id)) + "/" + std::to_string(count),
             wrong, h);
}

template <class A>
void counts_for(gs::transport::shm& t, rank_env& env, bool register_it) {
  const std::size_t n = t.size();
  // 9001 floats: past one-shot's inline size; 40000: past its registered_min_bytes.
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, n, std::size_t{9001},
                            std::size_t{40000}, std::size_t{1000003}}) {
    compare_case<A, float, gs::op::sum_t>(t, env, count, register_it);
    compare_case<A, double, gs::op::avg_t>(t, env, count, register_it);
    compare_case<A, gs::half, gs::op::sum_t>(t, env, count, register_it);
    compare_case<A, gs::bfloat16, gs::op::max_t>(t, env, count, register_it);
    compare_case<A, std::int32_t, gs::op::prod_t>(t, env, count, register_it);
    compare_case<A, std::int64_t, gs::op::min_t>(t, env, count, register_it);
  }
  // Large enough for non-temporal stores, odd so slices are uneven.
  compare_case<A, float, gs::op::sum_t>(t, env, (std::size_t{3} << 20) + 5, register_it);
}

void check_registered_outcomes(const std::vector<rank_outcome>& out) {
  std::size_t bad = 0;
  std::string first;
  for (std::size_t r = 0; r < out.size(); ++r) {
    INFO("rank " << r << ": " << out[r].what);
    CHECK(out[r].status == 0);
    REQUIRE(out[r].records.size() == out[0].records.size());
    for (std::size_t i = 0; i < out[r].records.size(); ++i) {
      const auto& a = out[0].records[i];
      const auto& b = out[r].records[i];
      if ((std::string(a.label) != b.label || b.wrong != 0 || b.hash != a.hash) && bad++ < 10)
        first += "\n  rank " + std::to_string(r) + " " + b.label +
                 ": wrong=" + std::to_string(b.wrong) + (b.hash == a.hash ? "" : " (bits differ)");
    }
  }
  INFO("first failures:" << first);
  CHECK(bad == 0);
  CHECK(out[0].records.size() > 0);
}

// `unregistered_rank`: this rank passes ordinary vectors (everyone must stage).
void run_on(std::size_t n, std::size_t unregistered_rank) {
  gs::testbed::watchdog wd(170, "shm registered buffers on " + std::to_string(n) + " processes");
  const auto out = gs::testbed::fork_ranks(
      n, gs::testbed::unique_job("registered"),
      [unregistered_rank](gs::transport::shm& t, rank_env& env) {
        const bool reg = t.rank() != unregistered_rank;
        counts_for<gs::algo::direct_two_shot>(t, env, reg);
        counts_for<gs::algo::direct_one_shot>(t, env, reg);
        counts_for<gs::algo::auto_select>(t, env, reg);
        counts_for<gs::algo::ring>(t, env, reg);
      },
      {.time_limit = 160,
       .max_records = 1024,
       .configure = [](gs::transport::shm_options& o) { o.heap_bytes = heap_bytes; },
       .while_running = {}});
  check_registered_outcomes(out);
}

// A peer whose registered-buffer notes lie (corrupt or mismatched): while `lie` is set,
// rank `liar` publishes it as its buffer's offset in its heap.
struct lying_shm : gs::transport::shm {
  lying_shm(gs::transport::shm_options o, std::size_t liar) : shm(std::move(o)), liar_(liar) {}
  std::size_t registered_offset(const void* p, std::size_t bytes) const {
    const std::size_t off = shm::registered_offset(p, bytes);
    return rank() == liar_ && off != npos && lie ? *lie : off;
  }
  std::optional<std::size_t> lie;
  std::size_t liar_;
};

// Each direct collective on registered buffers while rank 1 lies with `lie(real offset)`:
// every rank throws errc::mismatch naming rank 1 and `part`; then, the lie withdrawn,
// an allreduce on the same transport is exact (the failed call left the slots usable).
// `bytes_too`: also allgather and broadcast, which move bytes (no alignment to check).
template <class Lie>
void lying_peer_case(lying_shm& t, rank_env& env, const std::string& tag, const std::string& part,
                     bool bytes_too, Lie&& lie) {
  const std::size_t n = t.size(), count = 9001 * n;
  auto in = t.allocate<float>(count);
  auto out = t.allocate<float>(count);
  auto chunk = t.allocate<float>(count / n);
  auto big = t.allocate<float>(40000);   // one-shot reads it in place (registered_min_bytes)
  auto small = t.allocate<float>(9001);  // past inline, below 128 KiB: one-shot stages it
  const std::size_t real = t.registered_offset(in.data(), count * sizeof(float));
  auto reset = [&] {
    gs::testing::fill_inputs(in.span(), gs::op::sum_t::id, t.rank(), n);
    std::fill(out.data(), out.data() + count, 0.0f);
  };
  // Every rank must throw errc::mismatch naming rank 1 and what was wrong.
  auto expect = [&](const std::string& what, auto&& call) {
    std::string got = "no error";
    try {
      call();
    } catch (const gs::error& e) {
      got = e.what();
      if (e.code() == gs::errc::mismatch &&
          got.find("rank 1 published a registered buffer") != std::string::npos &&
          got.find(part) != std::string::npos) {
        got.clear();
      }
    }
    if (!got.empty())
      std::fprintf(stderr, "rank %zu, %s: %s\n", t.rank(), what.c_str(), got.c_str());
    env.report(tag + "/" + what, got.empty() ? 0 : 1, 0);
  };
  reset();
  t.lie = lie(real);
  expect("allreduce",
         [&] { gs::allreduce<gs::algo::direct_two_shot>(t, in.span(), gs::op::sum_t{}); });
  expect("one-shot allreduce",
         [&] { gs::allreduce<gs::algo::direct_one_shot>(t, big.span(), gs::op::sum_t{}); });
  {  // Below registered_min_bytes (3 ranks) one-shot reads no note: exact despite the lie.
    gs::testing::fill_inputs(small.span(), gs::op::sum_t::id, t.rank(), n);
    std::uint64_t wrong = 1;
    try {
      gs::allreduce<gs::algo::direct_one_shot>(t, small.span(), gs::op::sum_t{});
      wrong = gs::testing::count_wrong(std::span<const float>(small.span()), gs::op::sum_t::id, n);
    } catch (const gs::error& e) {
      std::fprintf(stderr, "rank %zu, staged one-shot: %s\n", t.rank(), e.what());
    }
    env.report(tag + "/staged one-shot", wrong, 0);
  }
  if (bytes_too) {
    expect("allgather",
           [&] { gs::allgather(t, std::span<const float>(chunk.span()), out.span()); });
    expect("broadcast", [&] { gs::broadcast(t, in.span(), 1); });
  }
  expect("reduce_scatter", [&] {
    gs::reduce_scatter(t, std::span<const float>(in.span()), chunk.span(), gs::op::sum_t{});
  });
  t.lie.reset();
  reset();
  gs::allreduce<gs::algo::direct_two_shot>(t, in.span(), gs::op::sum_t{});
  env.report(tag + "/after",
             gs::testing::count_wrong(std::span<const float>(in.span()), gs::op::sum_t::id, n),
             gs::testing::fnv1a64(in.data(), count * sizeof(float)));
}

}  // namespace

TEST_CASE("shm registered buffers: exact and equal to the staged path, 1..6 processes") {
  for (std::size_t n = 1; n <= 6; ++n) {
    INFO(n << " processes");
    run_on(n, n);  // every rank registered
  }
}

TEST_CASE("shm registered buffers: one unregistered rank sends everyone down the staged path") {
  run_on(2, 1);
  run_on(3, 0);
}

TEST_CASE("shm heap: allocation limits, reuse after release, and sizes named in errors") {
  gs::transport::shm_options o;
  o.rank = 0;
  o.size = 1;
  o.job = gs::testbed::unique_job("heap");
  o.heap_bytes = 1 << 20;
  gs::transport::shm t(o);
  CHECK(t.heap_bytes() == (1u << 20));
  {
    auto a = t.allocate<float>(100000);  // 400 KB
    auto b = t.allocate<float>(100000);
    CHECK(t.registered_offset(a.data(), 400000) != gs::transport::shm::npos);
    CHECK(t.registered_offset(b.data() + 1, 4) != gs::transport::shm::npos);
    std::vector<float> v(4);
    CHECK(t.registered_offset(v.data(), 16) == gs::transport::shm::npos);
    // A third one does not fit: the message names the request and the heap.
    try {
      auto c = t.allocate<float>(100000);
      FAIL("allocate beyond the heap did not throw");
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::invalid_argument);
      CHECK(std::string(e.what()).find("400000 bytes requested") != std::string::npos);
      CHECK(std::string(e.what()).find("heap_bytes") != std::string::npos);
    }
    a.reset();
    auto c = t.allocate<float>(100000);  // a's space is free again
    CHECK(c.data() == reinterpret_cast<float*>(const_cast<std::byte*>(t.heap(0))));
  }
  auto whole = t.allocate<std::byte>(1 << 20);  // everything was released: all of it fits
  CHECK(whole.size() == (1u << 20));
  try {
    auto too_big = t.allocate<double>((1 << 20) / 8 + 1);
    FAIL("allocate larger than the heap did not throw");
  } catch (const gs::error& e) {
    CHECK(std::string(e.what()).find("exceeds this rank's heap of 1048576 bytes") !=
          std::string::npos);
  }
}

TEST_CASE("shm heap: ranks passing different heap sizes get a mismatch naming both") {
  gs::testbed::watchdog wd(60, "shm heap size mismatch");
  // Rank 1 refuses rank 0's layout; rank 0, waiting for it to attach, hears so at once
  // instead of at its 20 s bootstrap deadline.
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = gs::testbed::fork_ranks(
      2, gs::testbed::unique_job("heapmismatch"), [](gs::transport::shm&, rank_env&) {},
      {.time_limit = 40,
       .max_records = 4,
       .configure =
           [](gs::transport::shm_options& o) {
             o.heap_bytes = o.rank == 0 ? (1 << 20) : (2 << 20);
             o.bootstrap_timeout = gs::seconds_d(20);
           },
       .while_running = {}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_MESSAGE(s < 10, "took " << s << " s");
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << out[r].what);
    CHECK(out[r].error_code == static_cast<int>(gs::errc::mismatch));
    CHECK(out[r].what.find("heap 1048576 bytes") != std::string::npos);
    CHECK(out[r].what.find("heap 2097152 bytes") != std::string::npos);
  }
  CHECK(out[0].what.find("rank 1 expects") != std::string::npos);
}

TEST_CASE("shm: a segment larger than the free shared memory is refused by name") {
  gs::transport::shm_options o;
  o.rank = 0;
  o.size = 1;
  o.job = gs::testbed::unique_job("toobig");
  o.heap_bytes = std::size_t{1} << 42;  // 4 TiB: more than any test machine's /dev/shm
  try {
    gs::transport::shm t(o);
    FAIL("a 4 TiB segment was created");
  } catch (const gs::error& e) {
    CAPTURE(e.what());
    CHECK(e.code() == gs::errc::transport);
    CHECK(std::string(e.what()).find("bytes free") != std::string::npos);
    CHECK(std::string(e.what()).find("heap 4398046511104 bytes") != std::string::npos);
  }
  CHECK_FALSE(gs::testbed::segment_exists(o.job));
}

TEST_CASE(
    "shm registered buffers: a peer's note outside its heap or misaligned is a mismatch "
    "naming it on every rank, and the transport stays usable") {
  gs::testbed::watchdog wd(120, "shm registered buffers with a lying peer");
  const std::string job = gs::testbed::unique_job("lying");
  const auto out = gs::testbed::fork_ranks(
      3, gs::testbed::unique_job("lyingboot"),
      [&job](gs::transport::shm& boot, rank_env& env) {
        gs::transport::shm_options o;
        o.rank = boot.rank();
        o.size = boot.size();
        o.job = job;
        o.heap_bytes = heap_bytes;
        lying_shm t(o, 1);
        lying_peer_case(t, env, "past the end", "outside its heap", true,
                        [](std::size_t) { return heap_bytes - 8; });
        lying_peer_case(t, env, "wrapping", "outside its heap", true,
                        [](std::size_t) { return ~std::size_t{0} - 64; });
        lying_peer_case(t, env, "misaligned", "not aligned to 4 bytes", false,
                        [](std::size_t real) { return real + 2; });
      },
      {.time_limit = 100, .max_records = 64, .configure = {}, .while_running = {}});
  check_registered_outcomes(out);
  CHECK(out[0].records.size() == 19);
}
