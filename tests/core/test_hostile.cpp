// SPDX-License-Identifier: Apache-2.0
// Hostile and broken input (docs/reliability.md): values that come from the environment,
// the caller's options or a peer are checked before they become a deadline, a size or an
// index. Each case names the input, the error (or the saturated behaviour) it must give,
// and would fail, or write out of bounds, without its check.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <gradsync/check/finite.hpp>
#include <gradsync/fusion/plan_check.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/transport/cuda_ipc/agree.hpp>

#include "watchdog.hpp"
#include "text.hpp"

namespace gs = gradsync;
using gradsync::testbed::contains;

namespace {

// Sets an environment variable while alive.
struct env_var {
  env_var(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~env_var() { ::unsetenv(name_); }
  env_var(const env_var&) = delete;
  env_var& operator=(const env_var&) = delete;

 private:
  const char* name_;
};

// The error `f` throws; fails the test case when it throws nothing.
template <class F>
gs::error thrown(F&& f) {
  try {
    f();
  } catch (const gs::error& e) {
    return e;
  }
  FAIL("no gradsync::error thrown");
  return gs::error(gs::errc::transport, {}, "unreachable");
}

}  // namespace

TEST_CASE("deadline: GRADSYNC_TIMEOUT=inf and 1e30 mean no deadline, not an expired one") {
  for (const std::string v : {"inf", "1e30", "1e300", "1e9"}) {
    CAPTURE(v);
    env_var e("GRADSYNC_TIMEOUT", v.c_str());
    const gs::deadline d = gs::deadline::after(gs::read_timeout_env());
    CHECK_FALSE(d.expired());
    CHECK(d.seconds_left() > 1e8);
    // The stall threshold derived from it (a tenth) saturates as well.
    gs::stall_watch w(gs::stall_threshold(gs::read_timeout_env()));
    w.enter(0, {});
    CHECK_FALSE(w.due(gs::clock::now() + std::chrono::hours(24 * 365)));
  }
  for (const double v : {1e30, std::numeric_limits<double>::infinity(), 9.3e9}) {
    CAPTURE(v);
    const gs::call_options opt{.timeout = gs::seconds_d{v}};
    CHECK_FALSE(opt.make_deadline().expired());
  }
  // A deadline far in the past saturates too (no overflow).
  CHECK(gs::deadline::after(gs::seconds_d{-1e30}).expired());
}

TEST_CASE("deadline: NaN, negative and zero GRADSYNC_TIMEOUT are refused naming the variable") {
  for (const std::string v : {"nan", "-nan", "-5", "0", "-inf", "5s", " "}) {
    CAPTURE(v);
    env_var e("GRADSYNC_TIMEOUT", v.c_str());
    const gs::error err = thrown([] { (void)gs::read_timeout_env(); });
    CHECK(err.code() == gs::errc::invalid_argument);
    CHECK(contains(err.what(), "GRADSYNC_TIMEOUT"));
  }
  env_var e("GRADSYNC_STALL_WARN", "nan");
  const gs::error err = thrown([] { (void)gs::stall_threshold(gs::seconds_d{300}); });
  CHECK(err.code() == gs::errc::invalid_argument);
  CHECK(contains(err.what(), "GRADSYNC_STALL_WARN"));
}

TEST_CASE("deadline: call_options::timeout = NaN is refused naming the option") {
  const gs::call_options opt{.timeout = gs::seconds_d{std::nan("")}};
  const gs::error err = thrown([&] { (void)opt.make_deadline(); });
  CHECK(err.code() == gs::errc::invalid_argument);
  CHECK(contains(err.what(), "call_options::timeout"));
}

TEST_CASE("deadline: an allreduce with timeout 1e30 completes instead of timing out at once") {
  gs::testbed::watchdog dog(60, "allreduce with a 1e30 s timeout");
  gs::transport::run_local(2, [](gs::transport::local& t) {
    std::vector<float> v(1000, float(t.rank() + 1));
    gs::allreduce<gs::algo::ring>(t, std::span<float>(v), gs::op::sum,
                                  {.timeout = gs::seconds_d{1e30}});
    CHECK(v[999] == 3.0f);
  });
}

TEST_CASE("shape: rows x cols that wraps size_t is refused at add(), naming the tensor") {
  gs::testbed::watchdog dog(60, "wrapping shape");
  // (2^61 + 64) x 16 = 2^65 + 1024: 1024 modulo 2^64, the tensor's count.
  const gs::matrix_shape bogus{(std::size_t{1} << 61) + 64, 16};
  gs::transport::run_local(1, [&](gs::transport::local& t) {
    using powersgd_t = gs::allreducer<gs::transport::local, gs::algo::ring,
                                      gs::fusion::bucket<1 << 20>, gs::compress::powersgd<4>>;
    powersgd_t ar(t);
    std::vector<float> w(1024);
    const gs::error err = thrown([&] { ar.add(std::span<float>(w), "layer1.weight", bogus); });
    CHECK(err.code() == gs::errc::invalid_argument);
    CHECK(contains(err.what(), "tensor #0 ('layer1.weight') has 1024 elements"));
    CHECK(contains(err.what(), "overflows"));
  });
  // The codec's own test of whether a shape gains must not wrap either: before, this
  // shape "gained", and the factors' sizes (4 x 2^61 ...) wrapped past the scratch.
  CHECK_FALSE(gs::compress::powersgd<4>::worth(bogus.rows, bogus.cols));
  CHECK_FALSE(gs::compress::powersgd<64>::worth(std::size_t{1} << 57, 66));
  CHECK(gs::compress::powersgd<4>::worth(64, 64));
  CHECK_FALSE(gs::compress::powersgd<4>::worth(8, 8));
}

namespace {

// A compress::channel for rank `me` of `n` whose allgather hands back `blocks` (every
// rank's block as gathered, the same table on every rank), so a test can corrupt a peer's.
struct scripted_channel {
  std::size_t me = 0, n = 2;
  std::vector<std::vector<std::byte>> blocks;
  std::vector<std::vector<std::byte>> held;

  std::size_t ranks() const { return n; }
  std::size_t rank() const { return me; }
  template <class W, class WOp>
  void allreduce(std::span<W>, WOp) {}
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) {
    for (std::size_t r = 0; r < n; ++r) {
      REQUIRE(blocks[r].size() == mine.size());
      std::copy(blocks[r].begin(), blocks[r].end(),
                all.begin() + static_cast<std::ptrdiff_t>(r * mine.size()));
    }
  }
  std::span<std::byte> scratch(std::size_t bytes) {
    held.emplace_back(bytes);
    return held.back();
  }
  template <class F>
  void timed(std::string_view, F&& f) {
    f();
  }
  std::span<const gs::compress::tensor_part> tensors() const { return {}; }
  bool overlaps_wire() const { return false; }
};
static_assert(gs::compress::channel<scripted_channel>);

}  // namespace

TEST_CASE("topk: a peer's index outside the bucket is errc::mismatch on every rank, no write") {
  using codec = gs::compress::topk<10>::codec<float, gs::op::sum_t>;
  const std::size_t count = 2000, k = gs::compress::topk<10>::keep(count);  // 20
  std::vector<float> input(count);
  for (std::size_t i = 0; i < count; ++i) input[i] = float(i % 97) - 48.0f;
  // Rank 1's block as its encoder makes it: k values, then k ascending indices.
  std::vector<std::uint32_t> idx(k);
  gs::kernels::topk_indices(idx.data(), input.data(), count, k);
  std::vector<std::byte> good(k * 8);
  for (std::size_t j = 0; j < k; ++j) {
    std::memcpy(good.data() + j * 4, &input[idx[j]], 4);
    std::memcpy(good.data() + k * 4 + j * 4, &idx[j], 4);
  }
  struct corruption {
    std::uint32_t index;
    const char* says;
  };
  for (const corruption c : {corruption{0xfffffff0u, "index 4294967280 at position 7"},
                             corruption{std::uint32_t(count), "index 2000 at position 7"},
                             corruption{idx[6], "not above the index before it"}}) {
    CAPTURE(c.index);
    std::vector<std::byte> bad = good;
    std::memcpy(bad.data() + k * 4 + 7 * 4, &c.index, 4);
    // Both ranks hold the same gathered table (rank 1's block is bad in both), so both
    // raise the same error; the bucket is left as it was, and nothing lands past it.
    for (std::size_t me : {0, 1}) {
      CAPTURE(me);
      scripted_channel ch{me, 2, {good, bad}, {}};
      std::vector<float> x(count + 64, 0.0f);
      std::copy(input.begin(), input.end(), x.begin());
      codec::state st;
      const gs::error err =
          thrown([&] { codec::run(ch, std::span<float>(x.data(), count), st, nullptr); });
      CHECK(err.code() == gs::errc::mismatch);
      CHECK(contains(err.what(), "rank 1 sent index "));
      CHECK(contains(err.what(), c.says));
      CHECK(err.site().peer == 1);
      CHECK(err.site().rank == me);
      CHECK(std::equal(input.begin(), input.end(), x.begin()));
      CHECK(std::all_of(x.begin() + count, x.end(), [](float v) { return v == 0.0f; }));
    }
  }
  // The same blocks, sound: decoded (rank 0's and rank 1's values added).
  scripted_channel ch{0, 2, {good, good}, {}};
  std::vector<float> x = input;
  codec::state st;
  codec::run(ch, std::span<float>(x), st, nullptr);
  CHECK(x[idx[0]] == 2 * input[idx[0]]);
}

namespace {

// Two ranks as threads: rank 0 runs `peer` (a hand-made, hostile side of a protocol),
// rank 1 runs `real` and returns the gradsync::error it must throw.
template <class Peer, class Real>
gs::error hostile_pair(Peer&& peer, Real&& real) {
  gs::testbed::watchdog dog(60, "hostile peer");
  std::optional<gs::error> got;
  gs::transport::run_local(2, [&](gs::transport::local& t) {
    const gs::deadline d = gs::deadline::after(gs::seconds_d{10});
    if (t.rank() == 0) {
      try {
        peer(t, d);
      } catch (const gs::error&) {  // the real rank may leave before the peer is done
      }
      return;
    }
    got = thrown([&] { real(t, d); });
  });
  REQUIRE(got.has_value());
  return *got;
}

}  // namespace

TEST_CASE("call header: a peer's algorithm bytes outside printable ASCII are escaped in messages") {
  const gs::call_header mine =
      gs::call_header::make(7, 100, gs::dtype::f32, gs::reduce_op::sum, "ring");
  gs::call_header theirs = mine;
  theirs.algo[1] = '\x01';
  theirs.algo[2] = '\xff';
  const std::string what = gs::detail::first_difference(mine, theirs);
  CAPTURE(what);
  CHECK(what == "algorithm ring vs r\\x01\\xffg");
  // No NUL in the field: the name stops at its 20 bytes.
  theirs.algo.fill('a');
  CHECK(theirs.algo_name() == std::string(20, 'a'));
}

TEST_CASE("non-finite check: a peer's finding without a NUL, or naming no tensor, is a mismatch") {
  struct forged {
    gs::finite_finding f;
    const char* says;
  };
  gs::finite_finding unterminated;  // every byte of both strings set
  std::memset(unterminated.who, 'A', sizeof unterminated.who);
  std::memset(unterminated.value, 'B', sizeof unterminated.value);
  gs::finite_finding far;  // a NaN in tensor #2^40 of a one-tensor call
  far.tensor = std::uint64_t{1} << 40;
  far.ranks_bad = 1;
  std::memcpy(far.value, "NaN", 3);
  std::memcpy(far.who, "rank 0", 6);
  for (const forged& c : {forged{unterminated, "a name or value field without its terminating NUL"},
                          forged{far, "tensor #1099511627776 of a call with 1 tensor(s)"}}) {
    CAPTURE(c.says);
    const gs::error err = hostile_pair(
        [&](gs::transport::local& t, gs::deadline d) {
          std::vector<gs::finite_finding> all;
          gs::detail::allgather_pod(t, c.f, all, gs::consistency_tag(t.next_seq()), d);
        },
        [](gs::transport::local& t, gs::deadline d) {
          gs::agree_finite(t, gs::finite_finding{.rank = 1}, d,
                           [](std::size_t) { return std::string("its input"); });
        });
    CHECK(err.code() == gs::errc::mismatch);
    CHECK(contains(err.what(), "rank 0 sent a non-finite finding naming " + std::string(c.says)));
    CHECK(err.site().peer == 0);
  }
}

TEST_CASE("plan check: rank 0 claiming 2^60 tensors costs no allocation; a bad magic is named") {
  std::vector<gs::fusion::tensor_desc> mine{{100, gs::dtype::f32, "a", {}},
                                            {200, gs::dtype::f32, "b", {}},
                                            {300, gs::dtype::f32, "c", {}}};
  gs::fusion::plan p;
  p.digest = 7;
  auto real = [&](gs::transport::local& t, gs::deadline d) {
    gs::fusion::check_plan(t, std::span<const gs::fusion::tensor_desc>(mine), p, d);
  };
  // The claimed count: before, rank 1 sized a vector (and its receive) by it.
  const gs::error err = hostile_pair(
      [](gs::transport::local& t, gs::deadline d) {
        namespace fd = gs::fusion::detail;
        const std::uint64_t seq = t.next_seq();
        std::vector<fd::plan_summary> table;
        gs::detail::allgather_pod(t, fd::plan_summary{0x67734650, std::uint64_t{1} << 60, 7}, table,
                                  gs::consistency_tag(seq), d);
        // What rank 1 asks for: its own list and one more; tensor #2 differs.
        const auto f32 = static_cast<std::uint64_t>(gs::dtype::f32);
        const std::vector<fd::wire_desc> ref{{100, f32}, {200, f32}, {301, f32}, {400, f32}};
        REQUIRE(table[1].tensors == 3);
        auto s = t.isend(1, ref.data(), ref.size() * sizeof(fd::wire_desc), gs::data_tag(seq));
        t.wait(s, d);
        std::vector<fd::diff_report> diffs;
        gs::detail::allgather_pod(t, fd::diff_report{}, diffs, gs::consistency_tag(t.next_seq()),
                                  d);
      },
      real);
  CHECK(err.code() == gs::errc::mismatch);
  CHECK(contains(err.what(),
                 "first differing tensor is #2 'c': rank 1 has count 300 float32, "
                 "rank 0 has count 301 float32"));
  const gs::error magic = hostile_pair(
      [](gs::transport::local& t, gs::deadline d) {
        std::vector<gs::fusion::detail::plan_summary> table;
        gs::detail::allgather_pod(t, gs::fusion::detail::plan_summary{0x12345678, 3, 7}, table,
                                  gs::consistency_tag(t.next_seq()), d);
      },
      real);
  CHECK(magic.code() == gs::errc::mismatch);
  CHECK(contains(magic.what(), "rank 0 sent a bucket-plan summary with an unknown magic number " +
                                   std::to_string(0x12345678)));
  CHECK(magic.site().peer == 0);
}

TEST_CASE("metrics: two jobs on one node write two files, each through a temporary of its own") {
  using mf = gs::observe::metrics_file;
  for (const char* v : {"GRADSYNC_SHM_JOB", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                        "SLURM_JOB_ID", "SLURM_STEP_ID"}) {
    ::unsetenv(v);
  }
  char dir[] = "/tmp/gradsync_hostile_metrics_XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string d = dir;
  // No launcher: the documented name.
  CHECK(mf::env_job_id().empty());
  CHECK(mf(d, "gradsync", 0).path() == d + "/gradsync.rank0.prom");
  {
    env_var ns("PMIX_NAMESPACE", "prterun-node1-4242@1");
    CHECK(mf::env_job_id() == "prterun-node1-4242@1");
    CHECK(mf(d, "gradsync", 1).path() == d + "/gradsync.prterun-node1-4242_1.rank1.prom");
  }
  {
    env_var id("SLURM_JOB_ID", "77"), step("SLURM_STEP_ID", "3");
    CHECK(mf::env_job_id() == "77.3");
  }
  // Two jobs, rank 0 each: two files, each sample labelled with its job.
  mf a(d, "gradsync", 0, {}, 10, "ompi-a"), b(d, "gradsync", 0, {}, 10, "ompi-b/x");
  CHECK(a.path() != b.path());
  CHECK(b.path() == d + "/gradsync.ompi-b_x.rank0.prom");
  // A stale temporary under the old shared name (here a directory, so opening it fails)
  // must not stop either writer: each writes through its own.
  const std::string shared_tmp = a.path() + ".tmp";
  REQUIRE(::mkdir(shared_tmp.c_str(), 0700) == 0);
  CHECK(a.temporary() != b.temporary());
  mf a2(d, "gradsync", 0, {}, 10, "ompi-a");
  CHECK(a2.temporary() != a.temporary());  // same file, another writer
  a.set("gradsync_calls_total", mf::kind::counter, "calls", 1);
  b.set("gradsync_calls_total", mf::kind::counter, "calls", 2);
  CHECK(a.write());
  CHECK(b.write());
  std::ifstream fa(a.path()), fb(b.path());
  std::stringstream sa, sb;
  sa << fa.rdbuf();
  sb << fb.rdbuf();
  CHECK(contains(sa.str(), "gradsync_calls_total{rank=\"0\",job_id=\"ompi-a\"} 1\n"));
  CHECK(contains(sb.str(), "gradsync_calls_total{rank=\"0\",job_id=\"ompi-b/x\"} 2\n"));
  CHECK(::access(a.temporary().c_str(), F_OK) != 0);  // renamed, none left behind
  CHECK(std::remove(a.path().c_str()) == 0);
  CHECK(std::remove(b.path().c_str()) == 0);
  CHECK(::rmdir(shared_tmp.c_str()) == 0);
  CHECK(::rmdir(dir) == 0);
}

TEST_CASE("cuda_ipc: ranks with different staging sizes or group sizes are a mismatch, named") {
  // The check cuda_ipc runs on the gathered cards before it maps any peer's region; every
  // rank checks the same table, so each rank gets the same message.
  using gs::transport::detail::ipc_card;
  auto card = [](std::uint64_t half, std::uint64_t ranks) {
    ipc_card c;
    c.half_bytes = half;
    c.ranks = ranks;
    return c;
  };
  const std::vector<ipc_card> same{card(1 << 20, 3), card(1 << 20, 3), card(1 << 20, 3)};
  CHECK_NOTHROW(gs::transport::detail::check_ipc_cards(1, same));
  for (std::size_t me : {0u, 2u}) {
    CAPTURE(me);
    const std::vector<ipc_card> sizes{card(1 << 20, 3), card(1 << 20, 3), card(2 << 20, 3)};
    const gs::error e = thrown([&] { gs::transport::detail::check_ipc_cards(me, sizes); });
    CHECK(e.code() == gs::errc::mismatch);
    CHECK(contains(e.what(),
                   "cuda_ipc: rank 2 has staging halves of 2097152 bytes and rank 0 "
                   "of 1048576; every rank must pass the same staging_bytes"));
  }
  const std::vector<ipc_card> groups{card(1 << 20, 2), card(1 << 20, 3)};
  CHECK(contains(thrown([&] { gs::transport::detail::check_ipc_cards(0, groups); }).what(),
                 "rank 1 was made for a group of 3 ranks and rank 0 for 2"));
  std::vector<ipc_card> foreign = same;
  foreign[1].magic = 42;
  const gs::error f = thrown([&] { gs::transport::detail::check_ipc_cards(0, foreign); });
  CHECK(f.code() == gs::errc::mismatch);
  CHECK(contains(f.what(), "rank 1 sent a handle card with magic 42"));
}
