// SPDX-License-Identifier: Apache-2.0
// gradsync::torch::data_parallel on in-process ranks (transport::local): ranks given the
// same batches end with the weights of a one-process run, bitwise, for every fusion
// policy; a rank with another model fails every rank naming the parameter; .grad lives
// where gradsync reduces it (and comes back there when replaced); unused parameters,
// bfloat16 parameters, accumulation without sync, compression and the replica check.
// That buckets start during backward is test_overlap.cpp (built twice: its mutation
// build must fail).
#include "torch_doctest.hpp"  // first: torch, then doctest

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/torch/data_parallel.hpp>

#include "local_outcomes.hpp"
#include "torch_models.hpp"
#include "watchdog.hpp"

namespace gs = gradsync;
namespace gt = gradsync::torch;
using local = gs::transport::local;
using torch_test::net;

namespace {

constexpr double lr = 0.05;

/// Trains `ranks` threads, each on the same batches from its own start (rank 0's is
/// broadcast); returns every rank's final weights hash.
template <class Sync>
std::vector<std::uint64_t> train_identical(std::size_t ranks,
                                           const std::vector<torch::Tensor>& init,
                                           const std::vector<torch_test::batch>& data,
                                           gt::data_parallel_options o = {}) {
  std::vector<std::uint64_t> hashes(ranks, 0);
  gs::transport::run_local(ranks, [&](local& t) {
    net m;
    torch_test::load(m, init, 0.25f * static_cast<float>(t.rank()));
    gt::data_parallel<Sync> dp(*m, t, o);
    torch_test::train(m, data, lr);
    CHECK(dp.steps() == data.size());
    hashes[t.rank()] = gt::replicas::hash(m->parameters());
  });
  return hashes;
}

template <class Fusion, class Algo>
void check_identical(std::size_t ranks) {
  CAPTURE(ranks);
  const auto init = torch_test::initial_params(7);
  const auto data = torch_test::batches(4, 16, 11);
  const std::uint64_t want = torch_test::reference_hash(init, data, lr);
  const auto got = train_identical<gs::allreducer<local, Algo, Fusion>>(ranks, init, data);
  CHECK(got == std::vector<std::uint64_t>(ranks, want));
}

}  // namespace

TEST_CASE("identical data: the weights of a one-process run, bitwise, for every fusion policy") {
  torch::set_num_threads(1);
  gs::testbed::watchdog wd(240, "identical data");
  // Two ranks: x + x and a halving are exact. Four: recursive halving adds pairs first,
  // so the sum is 4x exactly too (a ring's x + x + x could round).
  check_identical<gs::fusion::none, gs::algo::ring>(2);
  check_identical<gs::fusion::bucket<1 << 10>, gs::algo::ring>(2);
  check_identical<gs::fusion::zero_copy<1 << 10>, gs::algo::ring>(2);
  check_identical<gs::fusion::zero_copy<25 << 20>, gs::algo::halving_doubling>(4);
}

TEST_CASE("zero-copy: .grad is a view into the allreducer's arena") {
  torch::set_num_threads(1);
  gs::testbed::watchdog wd(120, "zero-copy views");
  gs::transport::run_local(2, [&](local& t) {
    net m;
    using sync_t = gs::allreducer<local, gs::algo::ring, gs::fusion::zero_copy<1 << 10>>;
    gt::data_parallel<sync_t> dp(*m, t);
    for (std::size_t i = 0; i < m->parameters().size(); ++i) {
      const auto g = m->parameters()[i].grad();
      REQUIRE(g.defined());
      const auto v = dp.sync().template view<float>(i);
      CHECK(g.data_ptr() == static_cast<void*>(v.data()));
      CHECK(static_cast<std::size_t>(g.numel()) == v.size());
    }
    // The last layer's parameters are registered last and fill bucket 0 (ready first).
    const auto& plan = dp.sync().plan();
    REQUIRE(!plan.buckets.empty());
    CHECK(dp.name(m->parameters().size() - 1) == "fc2.bias");
  });
}

TEST_CASE("a rank with another model fails on every rank, naming the parameter") {
  torch::set_num_threads(1);
  gs::testbed::watchdog wd(120, "model mismatch");
  const auto out = gs::testbed::run_catching(2, [&](local& t) {
    net m(false, t.rank() == 1 ? 20 : 16);  // rank 1's fc1 is wider
    gt::data_parallel<gs::allreducer<local, gs::algo::ring, gs::fusion::zero_copy<1 << 20>>> dp(*m,
                                                                                                t);
  });
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(out[r].threw);
    CHECK(out[r].code == gs::errc::mismatch);
    CHECK_MESSAGE(out[r].what.find("fc1.weight") != std::string::npos, out[r].what);
  }
}

TEST_CASE("a replaced .grad is copied back; an unused parameter counts as ready") {
  torch::set_num_threads(1);
  gs::testbed::watchdog wd(120, "replaced grad");
  const auto init = torch_test::initial_params(5, /*with_unused=*/true);
  const auto data = torch_test::batches(2, 8, 13);
  std::vector<std::uint64_t> hashes(2, 0);
  gs::transport::run_local(2, [&](local& t) {
    net m(true);
    torch_test::load(m, init);
    gt::data_parallel<gs::allreducer<local, gs::algo::ring, gs::fusion::zero_copy<1 << 12>>> dp(*m,
                                                                                                t);
    auto ps = m->parameters();
    const void* home = ps[2].grad().data_ptr();
    for (std::size_t s = 0; s < data.size(); ++s) {
      for (auto& p : ps) p.mutable_grad() = torch::Tensor();  // as zero_grad(set_to_none)
      // Rank 1's unused layer holds a gradient of its own: it is averaged like the rest.
      if (t.rank() == 1) ps.back().mutable_grad() = torch::full_like(ps.back(), 2.0);
      torch_test::loss_of(m, data[s]).backward();
      CHECK(ps[2].grad().data_ptr() == home);  // back in the arena
      // unused.bias: rank 0 had none (zeros), rank 1 had 2s: the average is 1.
      CHECK(torch::equal(ps.back().grad(), torch::ones_like(ps.back())));
    }
    hashes[t.rank()] = gt::replicas::hash(m->parameters());
    CHECK(dp.steps() == data.size());
  });
  CHECK(hashes[0] == hashes[1]);
}

TEST_CASE("bfloat16 parameters; accumulation with require_sync(false)") {
  torch::set_num_threads(1);
  gs::testbed::watchdog wd(120, "bf16");
  std::vector<std::uint64_t> hashes(2, 0);
  gs::transport::run_local(2, [&](local& t) {
    torch::manual_seed(1);
    torch::nn::Linear lin(8, 4);
    lin->to(torch::kBFloat16);
    gt::data_parallel<gs::allreducer<local, gs::algo::ring, gs::fusion::zero_copy<1 << 20>>> dp(
        *lin, t);
    // Rank r's input is r + 1 everywhere: the weight gradient of sum(W x + b) is x, so
    // the average over 2 ranks is 1.5 in every element, exactly.
    dp.require_sync(false);
    lin->forward(torch::full({1, 8}, 1.0 + t.rank(), torch::kBFloat16)).sum().backward();
    CHECK(dp.steps() == 0);  // accumulated locally
    dp.require_sync(true);
    lin->zero_grad();
    lin->forward(torch::full({1, 8}, 1.0 + t.rank(), torch::kBFloat16)).sum().backward();
    CHECK(dp.steps() == 1);
    CHECK(torch::equal(lin->weight.grad(), torch::full({4, 8}, 1.5, torch::kBFloat16)));
    CHECK(torch::equal(lin->bias.grad(), torch::ones({4}, torch::kBFloat16)));
    hashes[t.rank()] = gt::replicas::hash(lin->parameters());
  });
  CHECK(hashes[0] == hashes[1]);
}

TEST_CASE("compressed: int8 with error feedback trains and keeps replicas identical") {
  torch::set_num_threads(1);
  gs::testbed::watchdog wd(120, "compressed");
  const auto init = torch_test::initial_params(3);
  std::vector<std::uint64_t> hashes(2, 0);
  std::vector<double> first(2, 0), last(2, 0);
  gs::transport::run_local(2, [&](local& t) {
    net m;
    torch_test::load(m, init);
    const auto data = torch_test::batches(12, 16, 20 + t.rank());  // each rank its own data
    using sync_t = gs::allreducer<local, gs::algo::ring, gs::fusion::bucket<1 << 12>,
                                  gs::compress::error_feedback<gs::compress::int8<>>>;
    gt::data_parallel_options o;
    o.check_replicas_every = 4;
    gt::data_parallel<sync_t> dp(*m, t, o);
    torch::optim::SGD opt(m->parameters(), lr);
    for (std::size_t s = 0; s < 30; ++s) {
      opt.zero_grad();
      auto loss = torch_test::loss_of(m, data[s % data.size()]);
      if (s == 0) first[t.rank()] = loss.item<double>();
      if (s == 29) last[t.rank()] = loss.item<double>();
      loss.backward();
      opt.step();
    }
    CHECK(dp.sync().last_stats().ratio() > 2.0);
    hashes[t.rank()] = gt::replicas::hash(m->parameters());
  });
  CHECK(hashes[0] == hashes[1]);
  CHECK(last[0] < first[0]);
}

TEST_CASE("the replica check names a rank whose weights differ") {
  torch::set_num_threads(1);
  gs::testbed::watchdog wd(120, "replica check");
  const auto out = gs::testbed::run_catching(3, [&](local& t) {
    net m;
    gt::data_parallel<gs::allreducer<local, gs::algo::ring, gs::fusion::zero_copy<1 << 20>>> dp(*m,
                                                                                                t);
    dp.check_replicas();  // identical after the broadcast
    if (t.rank() == 2) {
      torch::NoGradGuard no_grad;
      m->fc1->bias[0] += 1;
    }
    dp.check_replicas();
  });
  for (std::size_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(out[r].threw);
    CHECK(out[r].code == gs::errc::diverged);
    CHECK(out[r].what.find("rank(s) 2 differ") != std::string::npos);
  }
}
