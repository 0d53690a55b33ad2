// SPDX-License-Identifier: Apache-2.0
// The data-parallel training loop, written once against the transport concept and
// instantiated per (transport, algorithm, fusion) by dispatch.hpp.
//
// Per step: the global batch (a slice of this epoch's shuffled order, which depends only
// on the seed) is cut into n contiguous shards; each rank runs forward/backward on its
// shard, scaling its summed gradient by n/B so that op::avg yields the global mean even
// when B is not divisible by n; gradsync averages the gradients; every rank applies the
// same SGD-with-momentum update to identical weights. Every epoch the ranks compare a
// hash of their weights and stop with an error naming the ranks that differ. With
// --reproducible the batch is cut into fixed micro-batches instead of per-rank shards,
// and their gradients are summed as exact integer codes (exact_sum.hpp).
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "checkpoint.hpp"
#include "config.hpp"
#include "data.hpp"
#include "exact_sum.hpp"
#include "grad_sync.hpp"
#include "metrics.hpp"
#include "model.hpp"
#include "report.hpp"
#include "rng.hpp"
#include "shard.hpp"

namespace mini_trainer {

/// What every rank of a process shares read-only: flags, data, the starting state.
struct run_context {
  const config& cfg;
  const dataset& train;
  const dataset& test;
  const mlp_shape& shape;
  const train_state& start;  // fresh (epoch 0) or loaded from a checkpoint
  std::string start_path;    // checkpoint it came from, "" when fresh
};

/// Weights diverged between ranks (names them).
struct replica_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline std::uint64_t weights_hash(const std::vector<float>& w) {
  return gradsync::testing::fnv1a64(w.data(), w.size() * sizeof(float));
}

/// Builds the gradient synchronizer chosen by --algo/--fusion over the gradient tensors.
/// "  wire 0.94 MB/step" (this rank's bytes on the wire in the last step), or nothing when
/// the synchronizer does not count them.
inline std::string wire_text(double bytes) {
  if (bytes < 0) return {};
  char b[48];
  std::snprintf(b, sizeof b, "  wire %.3f MB/step", bytes / 1e6);
  return b;
}

/// Makes the synchronizer over the gradient tensors, their matrix shapes and the bucket
/// cap in bytes (--bucket-mb; fusion bucket only).
template <class Tr>
using sync_factory = std::unique_ptr<gradient_sync> (*)(Tr&, std::vector<std::span<float>>,
                                                        std::vector<gradsync::matrix_shape>,
                                                        std::size_t);

/// --reproducible's synchronizer: over the int64 codes of each gradient tensor (op::sum),
/// with the bucket cap in bytes.
template <class Tr>
using code_factory = std::unique_ptr<gradient_sync> (*)(Tr&, std::vector<std::span<std::int64_t>>,
                                                        std::size_t);

/// ", built at -O<n> ..." when -Dtrainer_optimization lowered the level (scripts/test).
inline const char* build_note() {
#if defined(MINI_TRAINER_OPT_LEVEL) && MINI_TRAINER_OPT_LEVEL < 2
  return " (NOTE: built at -O" GRADSYNC_STRINGIFY(MINI_TRAINER_OPT_LEVEL) " by -Dtrainer_optimization="
      GRADSYNC_STRINGIFY(MINI_TRAINER_OPT_LEVEL) " for the tests: samples/s are not representative)";
#else
  return "";
#endif
}

/// Runs the whole training on rank t.rank(); returns the final line (same on every rank).
/// Compiled once per transport: the (algorithm, fusion) choice is behind `make_sync`.
template <class Tr>
std::string train_rank(Tr& t, const run_context& ctx, sync_factory<Tr> make_sync,
                       code_factory<Tr> make_codes = nullptr) {
  namespace gs = gradsync;
  using clk = std::chrono::steady_clock;
  const config& cfg = ctx.cfg;
  const std::size_t n = t.size(), r = t.rank(), B = cfg.batch;
  const bool lead = r == 0 && !cfg.quiet;
  auto say = [&](const char* fmt, auto... a) {
    if (lead) {
      std::printf(fmt, a...);
      std::fflush(stdout);
    }
  };

  const std::size_t steps_per_epoch = checked_steps_per_epoch(cfg, n, ctx.train.n);

  train_state st = ctx.start;  // this rank's copy
  std::vector<float>& w = st.params;
  std::vector<float>& v = st.momentum_buf;
  std::vector<float> g(w.size(), 0.0f);
  const std::size_t max_shard = (B + n - 1) / n;
  const std::size_t eval_chunk = 256;
  mlp net(ctx.shape, std::max(max_shard, eval_chunk), cfg.exact_grads);
  const std::size_t bucket_bytes =
      static_cast<std::size_t>(std::llround(cfg.bucket_mb * 1024 * 1024));
  // --reproducible: each micro-batch's gradient coded into integers at once (exact sums
  // in any order), and the codes are what the synchronizer sums.
  std::optional<exact_sum> exact;
  if (cfg.reproducible) {
    if (!make_codes) throw usage_error("--reproducible: this --algo/--fusion has no code sync");
    exact.emplace(ctx.shape.tensors(g));
  }
  const std::unique_ptr<gradient_sync> sync =
      exact ? make_codes(t, exact->code_tensors(), bucket_bytes)
            : make_sync(t, ctx.shape.tensors(g), ctx.shape.matrix_shapes(), bucket_bytes);
  std::vector<std::uint8_t> y(std::max(max_shard, eval_chunk));
  trainer_metrics metrics(r, cfg);  // GRADSYNC_METRICS: this rank's Prometheus file

  // Small collectives on doubles, always with algo::ring (hierarchical<ring> over two
  // levels): statistics and hashes (sums of integers below 2^53 and of values added to
  // zeros are exact, so every rank gets the same bits).
  using ring_here = std::conditional_t<gs::transport::is_two_level_v<Tr>, gs::algo::hierarchical<>,
                                       gs::algo::ring>;
  auto allreduce_sum = [&](std::vector<double>& x) {
    gs::allreduce<ring_here>(t, std::span<double>(x), gs::op::sum);
  };

  auto replica_check = [&](const std::string& when) {
    const std::uint64_t h = weights_hash(w);
    std::vector<double> all(2 * n, 0.0);
    all[2 * r] = static_cast<double>(h >> 32);
    all[2 * r + 1] = static_cast<double>(h & 0xffffffffu);
    allreduce_sum(all);
    std::vector<std::uint64_t> hashes(n);
    for (std::size_t q = 0; q < n; ++q) {
      hashes[q] = (static_cast<std::uint64_t>(all[2 * q]) << 32) |
                  static_cast<std::uint64_t>(all[2 * q + 1]);
    }
    if (const std::string why = replica_mismatch(hashes, when); !why.empty()) {
      throw replica_error(why);
    }
  };

  auto evaluate = [&]() {
    const std::size_t N = ctx.test.n, lo = r * N / n, hi = (r + 1) * N / n;
    std::vector<std::uint32_t> idx(eval_chunk);
    double correct = 0;
    for (std::size_t s = lo; s < hi; s += eval_chunk) {
      const std::size_t m = std::min(eval_chunk, hi - s);
      for (std::size_t i = 0; i < m; ++i) idx[i] = static_cast<std::uint32_t>(s + i);
      gather_batch(ctx.test, idx.data(), m, net.input(), y.data());
      correct += static_cast<double>(net.forward(w, y.data(), m).correct);
    }
    std::vector<double> c{correct};
    allreduce_sum(c);
    return c[0] / static_cast<double>(N);
  };

  if (!ctx.start_path.empty()) {
    say("resumed from %s: epoch %zu, step %zu of %zu, global step %zu\n", ctx.start_path.c_str(),
        std::size_t(st.epoch + 1), std::size_t(st.step_in_epoch), steps_per_epoch,
        std::size_t(st.global_step));
    if (st.ranks != n) {
      say("resuming with %zu ranks a checkpoint written by %zu ranks: same global batch %zu and "
          "data order; the shards differ, so the gradient sums are grouped differently (bitwise "
          "identical only with --exact-grads)\n",
          n, std::size_t(st.ranks), B);
    }
    if (st.algo != cfg.algo || st.fusion != cfg.fusion) {
      say("note: checkpoint written with --algo %s --fusion %s, continuing with --algo %s "
          "--fusion %s\n",
          st.algo.c_str(), st.fusion.c_str(), cfg.algo.c_str(), cfg.fusion.c_str());
    }
  } else {
    say("mini_trainer: model %s (%zu parameters), %zu ranks, transport %s, algo %s, fusion %s, "
        "compress %s, global batch %zu (%zu per rank), lr %g, momentum %g, %zu train / %zu test "
        "samples%s%s%s\n",
        ctx.shape.str().c_str(), w.size(), n, std::string(Tr::name).c_str(), cfg.algo.c_str(),
        cfg.fusion.c_str(), compress_key(cfg).c_str(), B, max_shard, double(cfg.lr),
        double(cfg.momentum), ctx.train.n, ctx.test.n, cfg.exact_grads ? ", exact grads" : "",
        cfg.reproducible
            ? (", reproducible sums of " + std::to_string(cfg.micro_batches) + " micro-batches")
                  .c_str()
            : "",
        build_note());
  }

  // Every rank starts from rank 0's state: its weights, momentum, data order and place
  // (a rank that drew other initial weights, or that cannot see the checkpoint directory
  // across hosts and started fresh, is brought in line), like DDP at construction.
  if (cfg.seed_per_rank && ctx.start_path.empty()) {  // test hook: ranks disagree at first
    mlp::init_params(ctx.shape, cfg.seed + r, w);
    st.epoch_rng = rng(cfg.seed + r).state();
  }
  {
    gs::broadcast(t, std::span<float>(w), 0);
    gs::broadcast(t, std::span<float>(v), 0);
    std::vector<std::int64_t> at;  // bit copies: int64_t is the element type gradsync moves
    for (std::uint64_t x : {st.epoch, st.step_in_epoch, st.global_step}) {
      at.push_back(static_cast<std::int64_t>(x));
    }
    for (std::uint64_t x : st.epoch_rng) at.push_back(static_cast<std::int64_t>(x));
    gs::broadcast(t, std::span<std::int64_t>(at), 0);
    st.epoch = static_cast<std::uint64_t>(at[0]);
    st.step_in_epoch = static_cast<std::uint64_t>(at[1]);
    st.global_step = static_cast<std::uint64_t>(at[2]);
    for (std::size_t i = 0; i < st.epoch_rng.size(); ++i) {
      st.epoch_rng[i] = static_cast<std::uint64_t>(at[3 + i]);
    }
    std::vector<double> stats{st.loss_sum, st.correct, st.seen};
    gs::broadcast(t, std::span<double>(stats), 0);
    st.loss_sum = stats[0], st.correct = stats[1], st.seen = stats[2];
  }
  replica_check(ctx.start_path.empty() ? "at start" : "after loading the checkpoint");

  // --shard-optimizer: this rank keeps the momentum of its shard only.
  std::optional<sharded_optimizer<Tr>> shard;
  if (cfg.shard_optimizer) {
    shard.emplace(t, w.size());
    shard->load_momentum(v);
    v.clear();
    v.shrink_to_fit();
    say("sharded optimizer: momentum %zu floats per rank (%zu for the whole model, 1/%zu)\n",
        shard->momentum_floats(), w.size(), n);
  }
  // The full momentum for a checkpoint (collective when sharded: every rank calls it).
  auto gather_momentum = [&] {
    if (shard) v = shard->full_momentum();
  };
  auto drop_momentum = [&] {
    if (shard) v.clear(), v.shrink_to_fit();
  };

  // Checkpoints written from here on describe this run.
  st.ranks = n, st.algo = cfg.algo, st.fusion = cfg.fusion, st.transport = std::string(Tr::name);
  st.lr = cfg.lr, st.momentum = cfg.momentum;

  // Running statistics of the epoch: `run` is reduced across ranks (same on all),
  // `mine` is this rank's part since the last reduction.
  double run_loss = st.loss_sum, run_correct = st.correct, run_seen = st.seen;
  double mine_loss = 0, mine_correct = 0, mine_seen = 0;
  auto reduce_stats = [&] {
    std::vector<double> x{mine_loss, mine_correct, mine_seen};
    allreduce_sum(x);
    run_loss += x[0], run_correct += x[1], run_seen += x[2];
    mine_loss = mine_correct = mine_seen = 0;
  };

  std::vector<std::uint32_t> shard_idx(max_shard);
  rng order;
  bool stopped = false;
  for (std::size_t epoch = st.epoch; epoch < cfg.epochs && !stopped; ++epoch) {
    order.set_state(st.epoch_rng);
    const std::vector<std::uint32_t> perm = order.permutation(ctx.train.n);
    double step_s = 0, sync_s = 0;  // this rank's time in steps and in gradient sync
    double win_step = 0, win_sync = 0;
    std::size_t win_steps = 0;
    const auto epoch_t0 = clk::now();
    auto win_t0 = epoch_t0;
    const std::size_t first_step = st.step_in_epoch;
    for (std::size_t s = first_step; s < steps_per_epoch; ++s) {
      const auto t0 = clk::now();
      // Rank r's samples of the global batch [lo, hi) into the model; returns the count.
      auto load = [&](std::size_t lo, std::size_t hi) {
        for (std::size_t i = lo; i < hi; ++i) shard_idx[i - lo] = perm[s * B + i];
        gather_batch(ctx.train, shard_idx.data(), hi - lo, net.input(), y.data());
        return hi - lo;
      };
      auto count = [&](const mlp::batch_stats& bs, std::size_t m) {
        mine_loss += bs.loss_sum, mine_correct += double(bs.correct), mine_seen += double(m);
      };
      clk::time_point ts;
      if (exact) {
        // Micro-batch j is [j B / M, (j + 1) B / M) of the global batch on any rank count;
        // its gradient (of the batch's mean loss) is coded as soon as it is computed.
        const std::size_t M = cfg.micro_batches;
        exact->accumulate(
            [&](exact_sum::accumulator& acc, std::size_t attempt) {
              for (std::size_t j = r; j < M; j += n) {
                const std::size_t m = load(j * B / M, (j + 1) * B / M);
                const auto bs = net.forward(w, y.data(), m);
                net.backward(w, y.data(), m, static_cast<float>(1.0 / double(B)), g);
                acc.add(g);
                if (attempt == 0) count(bs, m);
              }
            },
            [&](std::span<std::int8_t> fields) {
              gs::allreduce<ring_here>(t, fields, gs::op::max);
            });
        ts = clk::now();
        for (std::size_t l = 0; l < ctx.shape.layers(); ++l) sync->layer_ready(l);
        sync->finish();
        exact->decode(g);
      } else {
        const std::size_t m = load(r * B / n, (r + 1) * B / n);
        const auto bs = net.forward(w, y.data(), m);
        net.backward(w, y.data(), m, static_cast<float>(double(n) / double(B)), g,
                     [&](std::size_t l) {
                       if (!shard) sync->layer_ready(l);
                     });
        count(bs, m);
        ts = clk::now();
        if (shard) {
          shard->step(w, g, cfg.lr, cfg.momentum);  // the update is part of the sync here
        } else {
          sync->finish();
        }
      }
      const auto te = clk::now();
      if (!shard) sgd_momentum_step(w, v, g, cfg.lr, cfg.momentum);
      const auto t1 = clk::now();
      const double dt = std::chrono::duration<double>(t1 - t0).count();
      const double ds = std::chrono::duration<double>(te - ts).count();
      step_s += dt, sync_s += ds, win_step += dt, win_sync += ds, ++win_steps;
      metrics.step(dt, ds);
      ++st.global_step;
      st.step_in_epoch = s + 1;
      if (cfg.print_grad_hash && r == 0 && !shard) {  // sharded: no rank holds all of it
        print_grad_hash(std::size_t(st.global_step), weights_hash(g));
      }
      const bool progress =
          cfg.progress_every && (s + 1) % cfg.progress_every == 0 && s + 1 < steps_per_epoch;
      const bool ckpt = cfg.checkpoint_every && st.global_step % cfg.checkpoint_every == 0;
      if (progress || ckpt) reduce_stats();
      if (progress) {
        const double wall = std::chrono::duration<double>(clk::now() - win_t0).count();
        say("  epoch %zu step %5zu/%zu  loss %.4f  train_acc %.4f  %8.0f samples/s  sync %.1f "
            "ms/step "
            "(%.0f%% of step)%s\n",
            epoch + 1, s + 1, steps_per_epoch, run_loss / run_seen, run_correct / run_seen,
            double(win_steps * B) / wall, 1e3 * win_sync / double(win_steps),
            100.0 * win_sync / win_step,
            (shard ? std::string() : wire_text(sync->wire_bytes())).c_str());
        win_t0 = clk::now(), win_step = win_sync = 0, win_steps = 0;
      }
      if (ckpt) {
        st.loss_sum = run_loss, st.correct = run_correct, st.seen = run_seen;
        gather_momentum();
        if (r == 0) {
          const std::string p = save_checkpoint(cfg.checkpoint_dir, st);
          say("  checkpoint %s (epoch %zu step %zu)\n", p.c_str(), epoch + 1, s + 1);
        }
        drop_momentum();
      }
      if (cfg.throttle_ms) std::this_thread::sleep_for(std::chrono::milliseconds(cfg.throttle_ms));
      if (cfg.stop_after && st.global_step >= cfg.stop_after) {
        stopped = true;
        break;
      }
    }
    if (stopped) break;
    reduce_stats();
    const double train_s = std::chrono::duration<double>(clk::now() - epoch_t0).count();
    const std::size_t steps_run = steps_per_epoch - first_step;
    if (cfg.inject_divergence == static_cast<long>(r)) w[0] += 1e-3f;
    replica_check("after epoch " + std::to_string(epoch + 1));
    const double acc = evaluate();
    st.last_test_acc = acc;
    metrics.epoch(epoch + 1, acc);
    st.last_loss = run_loss / run_seen;
    say("epoch %zu/%zu  loss %.4f  train_acc %.4f  test_acc %.4f  %.0f samples/s  sync %.1f%% of "
        "step time (%.2f s of %.2f s)  replicas identical%s\n",
        epoch + 1, cfg.epochs, st.last_loss, run_correct / run_seen, acc,
        double(steps_run * B) / train_s, step_s > 0 ? 100.0 * sync_s / step_s : 0.0, sync_s, step_s,
        (shard ? std::string() : wire_text(sync->wire_bytes())).c_str());
    // The next epoch starts from the RNG state after this epoch's shuffle.
    st.epoch = epoch + 1;
    st.step_in_epoch = 0;
    st.epoch_rng = order.state();
    run_loss = run_correct = run_seen = 0;
    st.loss_sum = st.correct = st.seen = 0;
    if (!cfg.checkpoint_dir.empty()) {
      gather_momentum();
      if (r == 0) {
        const std::string p = save_checkpoint(cfg.checkpoint_dir, st);
        say("  checkpoint %s (end of epoch %zu)\n", p.c_str(), epoch + 1);
      }
      drop_momentum();
    }
  }
  if (exact) {
    say("reproducible sums: %zu of %zu steps redone (a block outgrew its exponent)\n",
        exact->redos(), std::size_t(st.global_step));
  }
  if (stopped) {
    replica_check("at --stop-after");
    say("stopped after global step %zu (--stop-after)\n", std::size_t(st.global_step));
  }

  return final_line(std::size_t(st.epoch), st.last_test_acc, st.last_loss, weights_hash(w));
}

/// The starting state: fresh from the seed, or the newest checkpoint in --checkpoint DIR
/// that loads (load_for_resume: an older one when the newest is damaged).
inline train_state initial_state(const config& cfg, const mlp_shape& shape, std::size_t ranks,
                                 std::string& from_path) {
  from_path.clear();
  if (cfg.resume) {
    train_state s;
    if (load_for_resume(cfg.checkpoint_dir, s, from_path)) {
      check_compatible(s, from_path, cfg, shape);
      return s;
    }
  }
  train_state s;
  s.dims = shape.dims;
  s.batch = cfg.batch, s.seed = cfg.seed, s.exact = exact_mode(cfg);
  s.lr = cfg.lr, s.momentum = cfg.momentum;
  s.epoch_rng = rng(cfg.seed).state();
  s.ranks = ranks;
  s.algo = cfg.algo, s.fusion = cfg.fusion, s.transport = cfg.transport;
  mlp::init_params(shape, cfg.seed, s.params);
  s.momentum_buf.assign(s.params.size(), 0.0f);
  return s;
}

}  // namespace mini_trainer
