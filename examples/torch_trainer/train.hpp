// SPDX-License-Identifier: Apache-2.0
// One rank's training loop, instantiated once per transport: the global batch is split
// evenly across ranks (rank r takes its slice of each global batch of a shuffle every
// rank draws alike), each rank runs forward and backward on its slice, the gradient
// synchronizer averages the gradients, every rank steps its optimizer. Returns the final
// line, identical on every rank (its timings are agreed across ranks).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/torch/replicas.hpp>

#include "../mini_trainer/report.hpp"
#include "../mini_trainer/rng.hpp"
#include "config.hpp"
#include "model.hpp"
#include "sync.hpp"

namespace torch_trainer {

/// What every rank of a run shares: the flags, the job and its starting weights.
struct run_context {
  const config& cfg;
  const task& job;
  const std::vector<torch::Tensor>& init;
};

/// Makes the synchronizer of one (--sync, --algo, --fusion, --compress) choice.
template <class Tr>
using sync_factory = std::unique_ptr<grad_sync> (*)(Tr&, torch::nn::Module&, const config&);

/// Sums `v` across ranks in place (statistics; every rank gets the same bits).
template <class Tr>
void sum_across(Tr& t, std::vector<double>& v) {
  if constexpr (gradsync::transport::is_two_level_v<Tr>) {
    gradsync::allreduce<gradsync::algo::hierarchical<>>(t, std::span<double>(v), gradsync::op::sum);
  } else {
    gradsync::allreduce<gradsync::algo::ring>(t, std::span<double>(v), gradsync::op::sum);
  }
}

/// The largest of `x` across ranks.
template <class Tr>
double max_across(Tr& t, double x) {
  if constexpr (gradsync::transport::is_two_level_v<Tr>) {
    gradsync::allreduce<gradsync::algo::hierarchical<>>(t, std::span<double>(&x, 1),
                                                        gradsync::op::max);
  } else {
    gradsync::allreduce<gradsync::algo::ring>(t, std::span<double>(&x, 1), gradsync::op::max);
  }
  return x;
}

/// A note for builds whose optimisation level makes samples/s meaningless.
inline const char* build_note() {
#if defined(TORCH_TRAINER_OPT_LEVEL) && TORCH_TRAINER_OPT_LEVEL < 2
  return " (NOTE: built at -O" GRADSYNC_STRINGIFY(TORCH_TRAINER_OPT_LEVEL) " for the tests: "
         "samples/s are not representative)";
#else
  return "";
#endif
}

template <class Tr>
std::string train_rank(Tr& t, const run_context& ctx, sync_factory<Tr> make) {
  using clk = std::chrono::steady_clock;
  const config& cfg = ctx.cfg;
  const task& job = ctx.job;
  const std::size_t n = t.size(), r = t.rank(), B = cfg.batch;
  auto say = [&](const char* fmt, auto... a) {
    if (r == 0 && !cfg.quiet) {
      std::printf(fmt, a...);
      std::fflush(stdout);
    }
  };
  if (B % n) {
    throw usage_error("--batch " + std::to_string(B) + " is not a multiple of the " +
                      std::to_string(n) + " ranks (every rank takes an equal slice)");
  }
  const std::size_t per_rank = B / n;
  const std::size_t steps_per_epoch = job.train_samples() / B;
  if (steps_per_epoch == 0) {
    throw usage_error("--batch " + std::to_string(B) + " is larger than the " +
                      std::to_string(job.train_samples()) + " training samples");
  }
  auto m = job.make_model();
  load_params(*m, ctx.init);
  std::unique_ptr<grad_sync> sync = make(t, *m, cfg);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (job.name() == "cnn") {
    opt = std::make_unique<torch::optim::SGD>(m->parameters(),
                                              torch::optim::SGDOptions(cfg.lr).momentum(0.9));
  } else {
    opt = std::make_unique<torch::optim::AdamW>(m->parameters(),
                                                torch::optim::AdamWOptions(cfg.lr).weight_decay(0));
  }
  say("torch_trainer: %s, %zu ranks, transport %s, sync %s, algo %s, fusion %s (%.0f MiB), "
      "compress %s, global batch %zu (%zu per rank), lr %g, %zu train / %zu test samples%s\n",
      job.describe().c_str(), n,
      std::string(gradsync::transport::is_two_level_v<Tr> ? "two_level" : Tr::name).c_str(),
      cfg.sync.c_str(), cfg.algo.c_str(), cfg.fusion.c_str(), cfg.bucket_mb,
      (cfg.compress + (composition_key(cfg).ends_with("+ef") ? " (error feedback)" : "")).c_str(),
      B, per_rank, cfg.lr, job.train_samples(), job.test_samples(), build_note());

  auto evaluate = [&](double& loss_out) {
    torch::NoGradGuard no_grad;
    m->eval();
    const std::size_t N = job.test_samples(), lo = r * N / n, hi = (r + 1) * N / n;
    std::vector<double> acc{0, 0};  // correct, loss sum
    std::vector<std::uint32_t> idx;
    for (std::size_t i = lo; i < hi; i += 256) {
      idx.clear();
      for (std::size_t j = i; j < std::min(hi, i + 256); ++j)
        idx.push_back(static_cast<std::uint32_t>(j));
      torch::Tensor x, y;
      job.batch(idx, true, x, y);
      const auto z = m->logits(x);
      const auto pos = static_cast<double>(y.numel());
      acc[1] += job.loss(z, y).item<double>() * pos;
      acc[0] += z.argmax(-1).eq(y).sum().item<double>();
    }
    m->train();
    sum_across(t, acc);
    const double positions = static_cast<double>(N * job.positions());
    loss_out = acc[1] / positions;
    return job.metric(acc[0], acc[1], positions);
  };

  mini_trainer::rng order(cfg.seed);
  std::vector<std::uint32_t> idx(per_rank);
  std::size_t global_step = 0;
  double train_s = 0, step_s = 0, sync_s = 0, last_loss = 0;
  std::string metric = job.metric(0, 0, 0);
  for (std::size_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    const std::vector<std::uint32_t> perm = order.permutation(job.train_samples());
    std::vector<double> run{0, 0};  // loss sum, samples (this rank, since the last line)
    double win_step = 0, win_sync = 0;
    std::size_t win_steps = 0;
    const auto epoch_t0 = clk::now();
    for (std::size_t s = 0; s < steps_per_epoch; ++s) {
      const auto t0 = clk::now();
      for (std::size_t i = 0; i < per_rank; ++i) idx[i] = perm[s * B + r * per_rank + i];
      torch::Tensor x, y;
      job.batch(idx, false, x, y);
      opt->zero_grad();
      const auto loss = job.loss(m->logits(x), y);
      loss.backward();  // overlap: buckets go out during it, and its end waits for them
      const auto tb = clk::now();
      sync->after_backward();  // per-parameter: every allreduce happens here
      opt->step();
      const auto t1 = clk::now();
      ++global_step;
      const double dt = std::chrono::duration<double>(t1 - t0).count();
      const double ds = cfg.sync == "overlap" ? sync->exposed_seconds()
                                              : std::chrono::duration<double>(t1 - tb).count();
      step_s += dt, sync_s += ds, win_step += dt, win_sync += ds, ++win_steps;
      run[0] += loss.item<double>() * static_cast<double>(per_rank);
      run[1] += static_cast<double>(per_rank);
      if (cfg.check_replicas && global_step % cfg.check_replicas == 0) {
        sync->check_replicas(global_step);
      }
      if (cfg.progress_every && (s + 1) % cfg.progress_every == 0 && s + 1 < steps_per_epoch) {
        say("  epoch %zu step %5zu/%zu  loss %.4f  %8.1f samples/s  sync %.1f ms/step (%.0f%% of "
            "step)\n",
            epoch + 1, s + 1, steps_per_epoch, run[0] / run[1],
            static_cast<double>(win_steps * B) / win_step,
            1e3 * win_sync / static_cast<double>(win_steps), 100.0 * win_sync / win_step);
        win_step = win_sync = 0, win_steps = 0;
      }
    }
    train_s += std::chrono::duration<double>(clk::now() - epoch_t0).count();
    sum_across(t, run);
    sync->check_replicas(global_step);
    double test_loss = 0;
    metric = evaluate(test_loss);
    last_loss = run[0] / run[1];
    say("epoch %zu/%zu  loss %.4f  %s (test loss %.4f)  replicas identical\n", epoch + 1,
        cfg.epochs, last_loss, metric.c_str(), test_loss);
  }
  // Agreed timings: samples/s over the slowest rank's training time, the mean sync share.
  std::vector<double> shares{step_s > 0 ? sync_s / step_s : 0.0};
  sum_across(t, shares);
  const double wall = max_across(t, train_s);
  const double samples = static_cast<double>(global_step * B);
  char line[320];
  std::snprintf(line, sizeof line,
                "final epoch=%zu %s loss=%.4f samples_per_s=%.1f sync_share=%.3f weights_fnv64=%s",
                cfg.epochs, metric.c_str(), last_loss, wall > 0 ? samples / wall : 0.0,
                shares[0] / static_cast<double>(n),
                mini_trainer::hex64(gradsync::torch::replicas::hash(m->parameters())).c_str());
  return line;
}

}  // namespace torch_trainer
