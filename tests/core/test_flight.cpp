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

namespace gs = gradsync;
using local = gs::transport::local;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

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
  CHECK(has(r0, "\"flight_recorder\":1,\"rank\":0,\"who\":\"rank 0\""));
  CHECK(has(r0,
            "\"kind\":\"allreduce\",\"algorithm\":\"ring\",\"type\":\"float32\",\"op\":\"avg\","
            "\"count\":1010"));
  CHECK(has(r0, "\"phase\":\"done\""));
  CHECK(has(r0, "\"phase\":\"failed\""));
  CHECK(has(r0, "fc.weight"));  // the bucket's label names its tensors
  const std::string text = report(b, 3);
  CHECK(has(text, "rank 2 never arrived, or never failed: it wrote no record"));
  CHECK(!has(text, "first disagreement"));
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
  CHECK(has(text, "first disagreement: op #1"));
  CHECK(has(text, "rank 0: allreduce tree of 100 float64, op max [failed]"));
  CHECK(has(text, "rank 1: allreduce tree of 101 float64, op max [failed]"));
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
  CHECK(!has(text, "\"seq\":5,"));
  const auto at6 = text.find("\"seq\":6,"), at9 = text.find("\"seq\":9,");
  CHECK(at6 != std::string::npos);
  CHECK(at9 != std::string::npos);
  CHECK(at6 < at9);
  std::remove(gs::flight_recorder::path_for(b, 7).c_str());
}
