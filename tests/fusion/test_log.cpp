// SPDX-License-Identifier: Apache-2.0
// GRADSYNC_LOG and GRADSYNC_TIMELINE from the environment (meson sets both for this
// test): log lines carry the rank prefix and report the composition, the bucket plan
// and timeouts; the timeline goes to the environment's path.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "capture_stderr.hpp"
#include "json_check.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
using local = gs::transport::local;

using gs::testbed::capture_stderr;

TEST_CASE("GRADSYNC_LOG values: the known levels, and an unknown one is reported on stderr") {
  CHECK(gs::current_log_level() == gs::log_level::debug);  // meson sets debug
  std::string said;
  {
    capture_stderr cap("test_log_level_stderr.txt");
    CHECK(gs::log_level_from(nullptr) == gs::log_level::warn);
    CHECK(gs::log_level_from("off") == gs::log_level::off);
    CHECK(gs::log_level_from("none") == gs::log_level::off);
    CHECK(gs::log_level_from("warn") == gs::log_level::warn);
    CHECK(gs::log_level_from("info") == gs::log_level::info);
    CHECK(gs::log_level_from("debug") == gs::log_level::debug);
    said = cap.text();
    CHECK(said.empty());  // known values are silent
  }
  capture_stderr cap("test_log_level_stderr.txt");
  CHECK(gs::log_level_from("DEBUG!") == gs::log_level::warn);
  said = cap.text();
  CHECK(said.find("GRADSYNC_LOG='DEBUG!' is not one of off, warn, info, debug") !=
        std::string::npos);
}

TEST_CASE("GRADSYNC_LOG=debug: composition, bucket plan and timeouts, with rank prefixes") {
  gs::testbed::watchdog wd(60, "log");
  REQUIRE(gs::current_log_level() == gs::log_level::debug);  // set by meson
  const std::string env_trace =
      std::getenv("GRADSYNC_TIMELINE") ? std::getenv("GRADSYNC_TIMELINE") : "";
  REQUIRE(!env_trace.empty());
  capture_stderr cap(env_trace + ".stderr");
  gs::transport::run_local(2, [&](local& t) {
    gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<8192>> ar(t);
    std::vector<std::vector<float>> v(5, std::vector<float>(700));
    for (auto& x : v) ar.add(std::span<float>(x));
    ar.commit(gs::op::avg);
    ar.allreduce_async().wait();
  });
  gs::transport::run_local(2, [&](local& t) {
    if (t.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      return;
    }
    gs::allreducer_options opt;
    opt.call.timeout = gs::seconds_d{0.2};
    opt.timeline = "";  // keep the first run's timeline file
    gs::allreducer<local, gs::algo::ring> ar(t, opt);
    std::vector<float> x(10);
    CHECK_THROWS_AS(ar.allreduce(std::span<float>(x), gs::op::sum), gs::error);
  });
  const std::string text = cap.text();
  CAPTURE(text);
  CHECK(text.find(
            "[gradsync rank 0] info: allreducer: transport=local algorithm=ring fusion=bucket") !=
        std::string::npos);
  CHECK(text.find("[gradsync rank 1] info: allreducer: transport=local") != std::string::npos);
  CHECK(text.find(
            "[gradsync rank 0] info: bucket plan (bucket, op avg): 3 bucket(s) for 5 tensor(s)") !=
        std::string::npos);
  CHECK(text.find(
            "[gradsync rank 1] debug: bucket 0: float32, 5600 bytes at offset 0, tensors 4 3") !=
        std::string::npos);
  CHECK(text.find("[gradsync rank 0] warn: bucket 0 failed (the allreducer is unusable from now "
                  "on): gradsync timeout on rank 0 (peer 1)") != std::string::npos);
  std::remove((env_trace + ".stderr").c_str());
  // The timeline path came from GRADSYNC_TIMELINE.
  for (std::size_t r = 0; r < 2; ++r) {
    const std::string f = gs::observe::timeline::path_for(env_trace, r);
    const std::string j = gs::testbed::read_file(f);
    CHECK(gs::testbed::json_checker(j).valid());
    CAPTURE(j);
    CHECK(j.find("\"name\":\"allreduce\"") != std::string::npos);
    std::remove(f.c_str());
  }
}
