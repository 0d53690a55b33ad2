// SPDX-License-Identifier: Apache-2.0
// The flight recorder (core/flight_recorder.hpp) and scripts/flight-report: an
// allreducer's ranks write their last calls when a call fails, and the report names the
// rank that never arrived, or the first call where the ranks disagreed.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "watchdog.hpp"
#include "text.hpp"

namespace gs = gradsync;
using gradsync::testbed::contains;
using local = gs::transport::local;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs scripts/flight-report on `path` and returns what it printed.
std::string report(const std::string& path, std::size_t ranks) {
  const std::string out = path + ".report.txt";
  const std::string cmd = "python3 " GRADSYNC_SOURCE_ROOT "/scripts/flight-report " + path +
                          " --ranks " + std::to_string(ranks) + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::string text = slurp(out);
  std::remove(out.c_str());
  CHECK_MESSAGE(rc == 0, text);
  return text;
}

std::string base(const char* what) {
  return "/tmp/gradsync_flight_" + std::string(what) + "_" + std::to_string(::getpid());
}

void remove_files(const std::string& b, std::size_t n) {
  for (std::size_t r = 0; r < n; ++r) std::remove(gs::flight_recorder::path_for(b, r).c_str());
}

gs::allreducer_options recorded(const std::string& path, double timeout) {
  gs::allreducer_options o;
  o.call.timeout = gs::seconds_d(timeout);
  o.flight_recorder = path;
  return o;
}

}  // namespace

TEST_CASE(
    "flight recorder: the ranks that waited write their calls; the report names the absent one") {
  gs::testbed::watchdog wd(60, "flight recorder timeout");
  const std::string b = base("late");
  gs::transport::run_local(3, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 20>> ar(t, recorded(b, 0.4));
    std::vector<float> w(1000, 1.0f), bias(10, 1.0f);
    ar.add(std::span<float>(w), "fc.weight");
    ar.add(std::span<float>(bias), "fc.bias");
    ar.commit(gs::op::avg);
    for (int step = 0; step < 3; ++step) ar.wait();
    if (t.rank() == 2) return;  // leaves after three steps: rank 2 never arrives at the fourth
    try {
      ar.wait();
      FAIL("the fourth step succeeded without rank 2");
    } catch (const gs::error& e) {
      CHECK((e.code() == gs::errc::timeout || e.code() == gs::errc::peer_lost));
    }
  });
  const std::string r0 = slurp(gs::flight_recorder::path_for(b, 0));
  CHECK(contains(r0, "\"flight_recorder\":1,\"rank\":0,\"who\":\"rank 0\""));
  CHECK(
      contains(r0,
               "\"kind\":\"allreduce\",\"algorithm\":\"ring\",\"type\":\"float32\",\"op\":\"avg\","
               "\"count\":1010"));
  CHECK(contains(r0, "\"phase\":\"done\""));
  CHECK(contains(r0, "\"phase\":\"failed\""));
  CHECK(contains(r0, "fc.weight"));  // the bucket's label names its tensors
  const std::string text = report(b, 3);
  CAPTURE(text);
  CHECK(contains(text, "rank 2 never arrived, or never failed: it wrote no record"));
  CHECK(!contains(text, "first disagreement"));
  remove_files(b, 3);
}

TEST_CASE("flight recorder: ranks that disagree are shown at the first call that differs") {
  gs::testbed::watchdog wd(60, "flight recorder mismatch");
  const std::string b = base("mismatch");
  gs::transport::run_local(2, [&](local& t) {
    gs::flight_recorder rec(b, t.rank());
    gs::call_options o;
    o.recorder = &rec;
    o.timeout = gs::seconds_d(5);
    std::vector<double> v(100, 1.0), w(t.rank() == 1 ? 101 : 100, 1.0);
    gs::allreduce<gs::algo::tree>(t, std::span<double>(v), gs::op::sum, o);
    try {
      gs::allreduce<gs::algo::tree>(t, std::span<double>(w), gs::op::max, o);
    } catch (const gs::error& e) {
      CHECK(e.code() == gs::errc::mismatch);
    }
  });
  const std::string text = report(b, 2);
  CHECK(contains(text, "first disagreement: op #1"));
  CHECK(contains(text, "rank 0: allreduce tree of 100 float64, op max [failed]"));
  CHECK(contains(text, "rank 1: allreduce tree of 101 float64, op max [failed]"));
  remove_files(b, 2);
}

TEST_CASE("flight recorder: a ring of the last N calls, oldest first") {
  const std::string b = base("ring");
  gs::flight_recorder rec(b, 7, 4);
  for (std::uint64_t s = 0; s < 10; ++s) {
    rec.enter(s, {"allreduce", "ring", gs::dtype::f32, gs::reduce_op::sum, s, "x"});
    rec.mark(s, gs::flight_recorder::phase::done);
  }
  REQUIRE(rec.dump("rank 7", "test"));
  const std::string text = slurp(gs::flight_recorder::path_for(b, 7));
  CHECK(!contains(text, "\"seq\":5,"));
  const auto at6 = text.find("\"seq\":6,"), at9 = text.find("\"seq\":9,");
  CHECK(at6 != std::string::npos);
  CHECK(at9 != std::string::npos);
  CHECK(at6 < at9);
  std::remove(gs::flight_recorder::path_for(b, 7).c_str());
}

TEST_CASE(
    "flight recorder: a dump replaces the file whole, labels stay UTF-8, two recorders "
    "of one path keep two files") {
  const std::string b = base("whole");
  const std::string f0 = gs::flight_recorder::path_for(b, 0);
  // The previous record, linked under a second name: written in place, the dump would
  // change it; renamed over it, the old file is left whole.
  std::ofstream(f0) << "old record\n";
  const std::string keep = f0 + ".keep";
  REQUIRE(::link(f0.c_str(), keep.c_str()) == 0);
  gs::flight_recorder a(b, 0);
  CHECK(a.path() == f0);
  // 94 bytes, then a 2-byte character across the 95-byte cut of the label.
  const std::string cut = std::string(94, 'a') + "\xc3\xa9" + "b";
  a.enter(1, {"allreduce", "ring", gs::dtype::f32, gs::reduce_op::sum, 10, cut});
  a.enter(2, {"allreduce", "ring", gs::dtype::f32, gs::reduce_op::sum, 10, "x\xffy"});
  REQUIRE(a.dump("rank 0", "cut \xe2\x82"));
  CHECK(slurp(keep) == "old record\n");
  const std::string text = slurp(f0);
  CHECK(contains(text, "\"label\":\"" + std::string(94, 'a') + "\""));
  CHECK(contains(text, "\"label\":\"x\\ufffdy\""));
  CHECK(contains(text, "\"error\":\"cut \\ufffd\\ufffd\""));
  CHECK(::access((f0 + "." + std::to_string(::getpid()) + ".tmp").c_str(), F_OK) != 0);
  {
    // Two more recorders of the same path and rank (two allreducers of one process).
    gs::flight_recorder c(b, 0), d(b + ".json", 0);
    CHECK(c.path() == b + ".2.rank0.json");
    CHECK(d.path() == b + ".3.rank0.json");
    REQUIRE(c.dump("second", "e"));
    CHECK(contains(slurp(f0), "\"who\":\"rank 0\""));  // the first one's record is intact
    CHECK(contains(slurp(c.path()), "\"who\":\"second\""));
    std::remove(c.path().c_str());
  }
  gs::flight_recorder e(b, 0);  // the names of destroyed recorders are free again
  CHECK(e.path() == b + ".2.rank0.json");
  std::remove(keep.c_str());
  std::remove(f0.c_str());
}

TEST_CASE("flight-report: a truncated, non-UTF-8 or foreign file is named; the others are read") {
  const std::string b = base("broken");
  auto put = [&](std::size_t r, const std::string& s) {
    std::ofstream(gs::flight_recorder::path_for(b, r), std::ios::binary) << s;
  };
  const std::string call0 =
      "{\"seq\":0,\"kind\":\"allreduce\",\"algorithm\":\"ring\",\"type\":\"float32\","
      "\"op\":\"sum\",\"count\":10,\"label\":\"\",\"phase\":\"done\",\"error\":\"\"}\n";
  const std::string call1 =
      "{\"seq\":1,\"kind\":\"allreduce\",\"algorithm\":\"ring\",\"type\":\"float32\","
      "\"op\":\"sum\",\"count\":10,\"label\":\"\",\"phase\":\"failed\",\"error\":\"timeout\"}\n";
  auto head = [](int r, const std::string& who) {
    return "{\"flight_recorder\":1,\"rank\":" + std::to_string(r) + ",\"who\":\"" + who +
           "\",\"error\":\"timeout\"}\n";
  };
  put(0, head(0, "rank 0") + call0 + call1);
  put(1, head(1, "rank 1") + call0 + call1.substr(0, 30));  // cut by a crash
  put(2, head(2,
              "rank \xff"
              "2") +
             call0 + call1);  // a byte that is no UTF-8
  put(3, std::string("\x7f"
                     "ELF garbage\n"));  // not a recorder's
  const std::string text = report(b, 4);
  const std::string wants[] = {gs::flight_recorder::path_for(b, 1) + ": truncated",
                               gs::flight_recorder::path_for(b, 2) + ": not UTF-8",
                               gs::flight_recorder::path_for(b, 3) + ": not a flight recorder file",
                               "rank 0 (rank 0): timeout",
                               "rank 2 (rank \xef\xbf\xbd"
                               "2): timeout",
                               "rank 1 never arrived: its last call was op #0",
                               "rank 3: its file could not be read"};
  for (const std::string& want : wants) CHECK_MESSAGE(contains(text, want), want);
  remove_files(b, 4);
}
