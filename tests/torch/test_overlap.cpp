// SPDX-License-Identifier: Apache-2.0
// gradsync::torch::data_parallel launches buckets while backward still runs: the first
// bucket's collective (from the allreducer's timeline) begins before the step's last
// gradient-accumulator hook. Built a second time with -DGRADSYNC_TORCH_TEST_NO_HOOK (hooks
// that do nothing), which must fail: the hooks are what makes the steps happen.
#include "torch_doctest.hpp"  // first: torch, then doctest

#include <chrono>
#include <cstddef>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/torch/data_parallel.hpp>

#include "watchdog.hpp"

namespace gs = gradsync;
namespace gt = gradsync::torch;
using local = gs::transport::local;

namespace {

/// Microseconds of the steady clock, as the timeline writes its timestamps.
double us_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

/// The start ("ts") of every complete event named `name` in a timeline file.
std::vector<double> event_starts(const std::string& path, const std::string& name) {
  std::ifstream f(path);
  std::vector<double> v;
  const std::string key = "\"name\":\"" + name + "\"";
  for (std::string line; std::getline(f, line);) {
    const auto ts = line.find("\"ts\":");
    if (line.find(key) != std::string::npos && ts != std::string::npos) {
      v.push_back(std::stod(line.substr(ts + 5)));
    }
  }
  return v;
}

}  // namespace

TEST_CASE("buckets start while backward still runs") {
  torch::set_num_threads(1);
  gs::testbed::watchdog wd(120, "overlap");
  struct deep_impl : torch::nn::Module {
    deep_impl() {
      for (int l = 0; l < 8; ++l) {
        layers.push_back(register_module("l" + std::to_string(l), torch::nn::Linear(192, 192)));
      }
    }
    torch::Tensor forward(torch::Tensor x) {
      for (auto& l : layers) x = torch::tanh(l->forward(x));
      return x.square().mean();
    }
    std::vector<torch::nn::Linear> layers;
  };
  std::vector<double> lead_us(2, -1);
  std::vector<std::size_t> buckets(2, 0);
  const std::string trace = "test_overlap.json";
  gs::transport::run_local(2, [&](local& t) {
    auto m = std::make_shared<deep_impl>();
    using sync_t = gs::allreducer<local, gs::algo::ring, gs::fusion::zero_copy<160 << 10>>;
    gt::data_parallel_options o;
    o.sync.timeline = trace;
    gt::data_parallel<sync_t> dp(*m, t, o);
    torch::Generator g = torch::make_generator<at::CPUGeneratorImpl>(3);
    const auto x = torch::randn({256, 192}, g);
    for (int s = 0; s < 3; ++s) {
      m->zero_grad();
      m->forward(x).backward();
    }
    REQUIRE(dp.steps() == 3);
    buckets[t.rank()] = dp.sync().plan().buckets.size();
    REQUIRE(dp.sync().timeline().write());
    // The last step's first collective began before its last gradient was ready. A
    // step's first bucket begins with the step's header agreement ("agree_step"), which
    // waits for the peer as the bucket's allreduce did when it agreed its own header.
    const auto& st = dp.last_step();
    const double from = us_of(st.first_ready), last_ready = us_of(st.last_ready);
    const std::string path = gs::observe::timeline::path_for(trace, t.rank());
    std::vector<double> starts = event_starts(path, "allreduce");
    for (double ts : event_starts(path, "agree_step")) starts.push_back(ts);
    double first = -1;
    for (double ts : starts) {
      if (ts >= from && (first < 0 || ts < first)) first = ts;
    }
    REQUIRE(first >= 0);
    lead_us[t.rank()] = last_ready - first;
  });
  CHECK(buckets[0] >= 4);
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(lead_us[r] > 0);  // microseconds the first bucket ran ahead of backward's end
  }
}
