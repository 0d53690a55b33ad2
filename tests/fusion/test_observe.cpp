// SPDX-License-Identifier: Apache-2.0
// Observability: the Chrome-trace timeline is valid JSON with the expected events
// (and none for packing in zero-copy mode); statistics and the summary line.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "forwarding.hpp"
#include "fusion_helpers.hpp"
#include "json_check.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using namespace fusion_test;
using local = gs::transport::local;

namespace {
std::string temp_base(const char* tag) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/gradsync_fusion_" + tag + "_" +
         std::to_string(::getpid());
}

// Two ranks run two steps of a 3-bucket model; between the first bucket's tensors and
// the rest the caller "computes" for 30 ms, so the progress thread waits for gradients.
template <class Fusion>
void traced_steps(const std::string& path) {
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer_options o;
    o.timeline = path;
    gs::allreducer<local, gs::algo::ring, Fusion> ar(t, o);
    std::vector<std::vector<float>> own(6, std::vector<float>(3000));
    std::vector<std::span<float>> ts;
    for (std::size_t i = 0; i < 6; ++i) {
      if constexpr (gs::fusion::is_zero_copy_v<Fusion>) {
        ar.template add<float>(3000);
      } else {
        ar.add(std::span<float>(own[i]));
      }
    }
    ar.commit(gs::op::sum);
    for (int step = 0; step < 2; ++step) {
      for (std::size_t i = 6; i-- > 4;) ar.ready(i);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      for (std::size_t i = 4; i-- > 0;) ar.ready(i);
      ar.wait();
    }
    CHECK(ar.timeline().size() > 0);
  });
}

bool python_json_ok(const std::string& file) {
  if (std::system("python3 -c 'import json' > /dev/null 2>&1") != 0) return true;  // no python
  const std::string cmd = "python3 -m json.tool '" + file + "' > /dev/null";
  return std::system(cmd.c_str()) == 0;
}
}  // namespace

TEST_CASE("timeline: one valid Chrome-trace JSON file per rank with the bucket phases") {
  gs::testbed::watchdog wd(60, "timeline packed");
  const std::string base = temp_base("packed") + ".json";
  traced_steps<
      gs::fusion::bucket<24000, gs::fusion::storage::packed, gs::fusion::order::reverse, 24000>>(
      base);
  for (std::size_t r = 0; r < 2; ++r) {
    const std::string f = gs::observe::timeline::path_for(base, r);
    CAPTURE(f);
    const std::string text = gs::testbed::read_file(f);
    REQUIRE(!text.empty());
    CHECK(gs::testbed::json_checker(text).valid());
    CHECK(python_json_ok(f));
    const auto names = gs::testbed::event_names(text);
    for (const char* want : {"wait_gradients", "pack", "allreduce", "send", "recv", "reduce",
                             "unpack", "wait", "gradsync rank ", "caller", "progress"}) {
      CAPTURE(want);
      bool found = false;
      for (const auto& n : names) found = found || n.rfind(want, 0) == 0;
      CHECK(found);
    }
    CHECK(text.find("\"pid\":" + std::to_string(r)) != std::string::npos);
    std::remove(f.c_str());
  }
}

TEST_CASE("timeline: zero-copy buckets have no pack or unpack events") {
  gs::testbed::watchdog wd(60, "timeline zero-copy");
  const std::string base = temp_base("zc");
  traced_steps<gs::fusion::zero_copy<24000, gs::fusion::order::reverse, 24000>>(base);
  for (std::size_t r = 0; r < 2; ++r) {
    const std::string f = gs::observe::timeline::path_for(base, r);
    CHECK(f == base + ".rank" + std::to_string(r) + ".json");
    const std::string text = gs::testbed::read_file(f);
    REQUIRE(!text.empty());
    CHECK(gs::testbed::json_checker(text).valid());
    const auto names = gs::testbed::event_names(text);
    CHECK(names.count("allreduce") == 1);
    CHECK(names.count("wait_gradients") == 1);
    CHECK(names.count("pack") == 0);
    CHECK(names.count("unpack") == 0);
    std::remove(f.c_str());
  }
}

namespace {
// A transport::local whose ranks say they cross a network, so that a codec's pieces go
// on the wire from a helper thread (compress/pieces.hpp) as they do across hosts.
struct networked_local : local {
  using local::local;
  static constexpr gs::transport_traits traits = [] {
    gs::transport_traits t = local::traits;
    t.may_cross_network = true;
    return t;
  }();
  bool crosses_network() const { return true; }
};
static_assert(gs::transport_policy<networked_local>);
}  // namespace

TEST_CASE(
    "timeline: a codec's pieces on the wire have a track of their own, so every track nests") {
  gs::testbed::watchdog wd(120, "timeline codec pieces");
  const std::string base = temp_base("pieces") + ".json";
  const std::size_t count = std::size_t{4} << 20;  // 16 MiB of exact32 codes: two pieces
  REQUIRE(gs::algo::tuning::codec_pieces(count * sizeof(std::int32_t)) == 2);
  auto group = std::make_shared<gs::transport::detail::local_group>(2);
  std::vector<std::size_t> wrong(2, 1);
  std::vector<std::thread> ranks;
  for (std::size_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      networked_local t(group, r);
      gs::allreducer_options o;
      o.timeline = base;
      gs::allreducer<networked_local, gs::algo::ring, gs::fusion::bucket<(std::size_t{32} << 20)>,
                     gs::compress::exact<32>>
          ar(t, o);
      std::vector<float> x(count, static_cast<float>(r + 1));
      ar.add(std::span<float>(x), "x");
      ar.commit(gs::op::sum);
      ar.ready(0);
      ar.wait();
      wrong[r] = static_cast<std::size_t>(
          std::count_if(x.begin(), x.end(), [](float v) { return v != 3.0f; }));
    });
  }
  for (auto& th : ranks) th.join();
  CHECK(wrong == std::vector<std::size_t>{0, 0});
  for (std::size_t r = 0; r < 2; ++r) {
    const std::string f = gs::observe::timeline::path_for(base, r);
    CAPTURE(f);
    const std::string text = gs::testbed::read_file(f);
    REQUIRE(gs::testbed::json_checker(text).valid());
    CHECK(gs::testbed::event_names(text).count("codec wire") == 1);
    const auto events = gs::testbed::complete_events(text);
    std::size_t on_wire = 0, passes = 0;
    for (const auto& e : events) {
      if (e.tid == static_cast<int>(gs::observe::track::codec_wire)) {
        ++on_wire;
        CHECK((e.name == "send" || e.name == "recv" || e.name == "reduce"));
      }
      if (e.name == "compress" || e.name == "decompress") {
        ++passes;
        CHECK(e.tid == static_cast<int>(gs::observe::track::progress));
      }
    }
    CHECK(on_wire > 0);
    CHECK(passes == 5);  // the exponent scan, two pieces coded, two decoded
    CHECK(gs::testbed::partial_overlap(events) == "");
    std::remove(f.c_str());
  }
}

TEST_CASE("json checker rejects broken JSON (so the timeline test can fail)") {
  CHECK(gs::testbed::json_checker("{\"a\":[1,2.5e3,\"x\\n\",true,null]}").valid());
  CHECK_FALSE(gs::testbed::json_checker("{\"a\":[1,2,]}").valid());
  CHECK_FALSE(gs::testbed::json_checker("{\"a\":1").valid());
  CHECK_FALSE(gs::testbed::json_checker("{\"a\":\"tab\there\"}").valid());
  CHECK(gs::observe::timeline::escape("a\"b\\c\n") == "a\\\"b\\\\c\\u000a");
}

TEST_CASE("statistics: per call and cumulative, and a one-line summary") {
  gs::testbed::watchdog wd(60, "stats");
  std::vector<std::string> lines(2);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>> ar(t);
    std::vector<std::vector<float>> v(10, std::vector<float>(1024));
    std::vector<std::span<float>> ts(v.begin(), v.end());
    ar.allreduce(ts, gs::op::sum);
    auto s = ar.last_stats();
    CHECK(s.tensors == 10);
    CHECK(s.buckets == 1);
    CHECK(s.bytes_in == 10 * 4096);
    CHECK(s.ranks == 2);
    CHECK(s.wire_measured);
    // ring on 2 ranks sends half the buffer in each phase, plus the 48-byte header
    CHECK(s.bytes_wire == 10 * 4096 + sizeof(gs::call_header));
    CHECK(s.algorithm == "ring");
    CHECK(s.fusion == "bucket");
    CHECK(s.seconds > 0);
    CHECK(s.pack_seconds > 0);
    CHECK(s.busbw() == doctest::Approx(s.algbw()));  // 2(n-1)/n = 1 for n = 2
    ar.allreduce(std::span<float>(v[0]), gs::op::sum);
    s = ar.last_stats();
    CHECK(s.tensors == 1);
    CHECK(s.pack_seconds == 0);  // one tensor: reduced in place
    const auto tot = ar.total_stats();
    CHECK(tot.calls == 2);
    CHECK(tot.tensors == 11);
    CHECK(tot.bytes_in == 11 * 4096);
    lines[t.rank()] = ar.summary();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(lines[r]);
    CHECK(lines[r].find("rank " + std::to_string(r) + "/2 ring+bucket") == 0);
    CHECK(lines[r].find("1 tensors in 1 buckets") != std::string::npos);
    CHECK(lines[r].find("total 2 calls") != std::string::npos);
    CHECK(lines[r].find('\n') == std::string::npos);
  }
}

TEST_CASE("statistics: auto_select reports what it chose per bucket") {
  gs::testbed::watchdog wd(60, "stats chosen");
  std::vector<std::string> chosen(2), lines(2), fixed(2);
  gs::transport::run_local(2, [&](local& t) {
    // Grouped call in registration order, buckets of at most 1 MiB: 256 KiB + 64 B
    // tensors make one 256 KiB-ish bucket each, and a 4 MiB tensor a bucket of its own.
    gs::allreducer<local, gs::algo::auto_select, gs::fusion::bucket<1 << 20>> ar(t);
    std::vector<float> big(1 << 20), mid(1 << 16), tiny(16);
    std::vector<std::span<float>> ts{std::span<float>(big), std::span<float>(mid),
                                     std::span<float>(tiny)};
    ar.allreduce(ts, gs::op::sum);
    const auto s = ar.last_stats();
    CHECK(s.algorithm == "auto");
    // The same rule the run used, asked directly for each bucket's size.
    const std::string big_c(gs::algo::auto_select::choice<local>(4u << 20, 2));
    const std::string rest_c(gs::algo::auto_select::choice<local>((1u << 18) + 64, 2));
    const std::string want = big_c == rest_c ? big_c + " x2" : big_c + " x1, " + rest_c + " x1";
    chosen[t.rank()] = s.chosen;
    fixed[t.rank()] = want;
    lines[t.rank()] = ar.summary();
    gs::allreducer<local, gs::algo::ring, gs::fusion::none> plain(t);
    plain.allreduce(std::span<float>(tiny), gs::op::sum);
    CHECK(plain.last_stats().chosen.empty());  // a fixed algorithm reports nothing extra
  });
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(lines[r]);
    CHECK(chosen[r] == fixed[r]);
    CHECK(lines[r].find("auto[" + fixed[r] + "]+bucket") != std::string::npos);
  }
}

namespace {
std::string slurp(const std::string& path) {
  std::string s;
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    std::fclose(f);
  }
  return s;
}
}  // namespace

TEST_CASE("metrics: an allreducer's Prometheus file counts its calls and bytes, with labels") {
  gs::testbed::watchdog wd(60, "metrics");
  char dir[] = "/tmp/gradsync_metrics_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer_options o;
    o.metrics = dir;
    o.metrics_job = "unit";
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>> ar(t, o);
    std::vector<float> a(1000, 1.0f);
    ar.add(std::span<float>(a), "a");
    ar.commit(gs::op::sum);
    for (int s = 0; s < 3; ++s) {
      ar.ready(0);
      ar.wait();
    }
  });  // the destructors write the last values
  for (int r = 0; r < 2; ++r) {
    const std::string f = std::string(dir) + "/unit.rank" + std::to_string(r) + ".prom";
    const std::string s = slurp(f);
    CAPTURE(s);
    const std::string labels = "{rank=\"" + std::to_string(r) +
                               "\",transport=\"local\",algorithm=\"ring\",fusion=\"bucket\","
                               "compression=\"none\"}";
    CHECK(s.find("# TYPE gradsync_calls_total counter\ngradsync_calls_total" + labels + " 3\n") !=
          std::string::npos);
    CHECK(s.find("gradsync_bytes_in_total" + labels + " 12000\n") != std::string::npos);
    CHECK(s.find("# TYPE gradsync_errors_total counter\n") != std::string::npos);
    CHECK(s.find("kind=\"timeout\"} 0\n") != std::string::npos);
    // One HELP per family, even with several samples (errors by kind).
    std::size_t helps = 0;
    for (std::size_t p = 0; (p = s.find("# HELP gradsync_errors_total", p)) != std::string::npos;
         ++p)
      ++helps;
    CHECK(helps == 1);
    CHECK(std::remove(f.c_str()) == 0);
    CHECK(std::fopen((f + ".tmp").c_str(), "r") == nullptr);  // renamed, none left behind
  }
  CHECK(std::remove(dir) == 0);
  CHECK(gs::observe::metrics_file::sanitize("9 bad-name") == "__bad_name");
  CHECK(gs::observe::metrics_file::escape("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

TEST_CASE("metrics: a collective longer than GRADSYNC_STALL_WARN counts as a stall") {
  gs::testbed::watchdog wd(60, "stalls");
  REQUIRE(setenv("GRADSYNC_STALL_WARN", "0.15", 1) == 0);
  std::vector<std::size_t> stalls(2, 99), total(2, 99);
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>> ar(t);
    std::vector<float> a(100, 1.0f);
    ar.add(std::span<float>(a), "a");
    ar.commit(gs::op::sum);
    ar.ready(0);  // a quick step: no stall
    ar.wait();
    if (t.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
    ar.ready(0);  // rank 0 waits about 0.6 s for rank 1
    ar.wait();
    stalls[t.rank()] = ar.last_stats().stalls;
    total[t.rank()] = ar.total_stats().stalls;
  });
  CHECK(stalls[0] == 1);
  CHECK(total[0] == 1);
  CHECK(stalls[1] == 0);  // rank 1 came late: its own collective was short
  // A bad value is refused where it is first read: by the transport (its stall watch).
  REQUIRE(setenv("GRADSYNC_STALL_WARN", "soon", 1) == 0);
  CHECK_THROWS_WITH_AS(gs::transport::run_local(1, [](local&) {}),
                       doctest::Contains("GRADSYNC_STALL_WARN must be a positive"), gs::error);
  REQUIRE(unsetenv("GRADSYNC_STALL_WARN") == 0);
}

namespace {
/// transport::local with its messages counted: those of header agreements (the
/// consistency tags, bit 0x4000) and the rest.
class counting : public gs::testbed::forwarding<local> {
 public:
  using request = local::request;

  explicit counting(local& t) : forwarding(t) {}
  request isend(std::size_t peer, const void* p, std::size_t bytes, std::uint32_t tag) {
    ++(tag == gs::consistency_tag(tag) ? headers : data);
    return t_.isend(peer, p, bytes, tag);
  }
  request irecv(std::size_t peer, void* p, std::size_t bytes, std::uint32_t tag) {
    return t_.irecv(peer, p, bytes, tag);
  }
  void wait(request& r, gs::deadline d) { t_.wait(r, d); }

  std::size_t headers = 0, data = 0;  // messages sent
};
}  // namespace

TEST_CASE("a step of a 50-bucket plan agrees its headers once: ceil(log2 n) messages") {
  gs::testbed::watchdog wd(60, "step agreement");
  constexpr std::size_t ranks = 4, tensors = 50;
  std::vector<std::size_t> step_headers(ranks), list_headers(ranks), wrong(ranks, 1);
  gs::transport::run_local(ranks, [&](local& lt) {
    counting t(lt);
    // 4 KiB tensors in 4 KiB buckets: one bucket per tensor. Ring checks no headers itself.
    gs::allreducer<counting, gs::algo::ring, gs::fusion::bucket<4096>> ar(t);
    std::vector<std::vector<float>> v(tensors, std::vector<float>(1024));
    std::vector<std::span<float>> ts(v.begin(), v.end());
    for (auto& s : ts) ar.add(s);
    ar.commit(gs::op::sum);
    REQUIRE(ar.plan().buckets.size() == tensors);
    const std::vector<std::size_t> first = firsts(std::vector<std::size_t>(tensors, 1024));
    std::size_t w = 0;
    const std::size_t h0 = t.headers;
    for (int step = 0; step < 3; ++step) {
      fill_model(ts, gs::reduce_op::sum, t.rank(), ranks, first);
      for (std::size_t i = tensors; i-- > 0;) ar.ready(i);
      ar.wait();
      w += wrong_model(ts, gs::reduce_op::sum, ranks, first);
    }
    step_headers[t.rank()] = t.headers - h0;
    // A grouped call of the same tensors still agrees each bucket's header.
    const std::size_t h1 = t.headers;
    fill_model(ts, gs::reduce_op::sum, t.rank(), ranks, first);
    ar.allreduce(ts, gs::op::sum);
    w += wrong_model(ts, gs::reduce_op::sum, ranks, first);
    list_headers[t.rank()] = t.headers - h1;
    wrong[t.rank()] = w;
  });
  for (std::size_t r = 0; r < ranks; ++r) {
    CAPTURE(r);
    CHECK(wrong[r] == 0);
    CHECK(step_headers[r] == 3 * 2);  // 3 steps x ceil(log2 4) Bruck rounds
    CHECK(list_headers[r] == tensors * 2);
  }
}

TEST_CASE("steps of two allreducers in a different order on two ranks: mismatch naming the plans") {
  gs::testbed::watchdog wd(60, "step order");
  std::vector<std::string> what(2);
  gs::transport::run_local(2, [&](local& t) {
    gs::call_options o;
    o.timeout = gs::seconds_d(20);
    gs::allreducer_options ao;
    ao.call = o;
    using ar_t = gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<4096>>;
    ar_t a(t, ao), b(t, ao);
    std::vector<float> x(1024, 1.0f), y(2048, 1.0f);
    a.add(std::span<float>(x));
    b.add(std::span<float>(y));
    a.commit(gs::op::sum);
    b.commit(gs::op::sum);
    ar_t& first = t.rank() == 0 ? a : b;
    try {
      first.ready(0);
      first.wait();
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::mismatch);
      what[t.rank()] = e.what();
    }
  });
  for (const auto& w : what) {
    CAPTURE(w);
    CHECK(w.find("the ranks run steps of different plans") != std::string::npos);
    CHECK(w.find("step 0 of plan ") != std::string::npos);
  }
}
