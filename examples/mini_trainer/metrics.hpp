// SPDX-License-Identifier: Apache-2.0
// The trainer's own Prometheus metrics (GRADSYNC_METRICS=DIR, beside gradsync's
// gradsync.rank<R>.prom): mini_trainer.rank<R>.prom with samples/s and the sync share of
// the steps since the last write, steps, epoch and test accuracy.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include <gradsync/observe/metrics.hpp>

#include "config.hpp"

namespace mini_trainer {

class trainer_metrics {
 public:
  trainer_metrics(std::size_t rank, const config& c)
      : f_(gradsync::observe::metrics_file::env_dir(), "mini_trainer", rank,
           "transport=\"" + esc(c.transport) + "\",algo=\"" + esc(c.algo) + "\",fusion=\"" +
               esc(c.fusion) + "\",compress=\"" + esc(c.compress) + "\""),
        batch_(c.batch) {}

  /// One step of `step_s` seconds, `sync_s` of them in gradient sync; writes when due.
  void step(double step_s, double sync_s) {
    if (!f_.enabled()) return;
    ++steps_, ++win_steps_;
    win_step_ += step_s, win_sync_ += sync_s;
    if (f_.due()) publish();
  }
  /// The end of an epoch (1-based) with its test accuracy: written now.
  void epoch(std::size_t e, double test_acc) {
    if (!f_.enabled()) return;
    epoch_ = e, test_acc_ = test_acc;
    publish();
  }

 private:
  static std::string esc(const std::string& v) {
    return gradsync::observe::metrics_file::escape(v);
  }

  void publish() {
    using k = gradsync::observe::metrics_file::kind;
    const auto now = std::chrono::steady_clock::now();
    const double wall = std::chrono::duration<double>(now - win_t0_).count();
    if (win_steps_) {
      samples_s_ = wall > 0 ? static_cast<double>(win_steps_ * batch_) / wall : 0;
      share_ = win_step_ > 0 ? win_sync_ / win_step_ : 0;
    }
    f_.set("mini_trainer_samples_per_second", k::gauge,
           "Global samples per second over the steps since the last write.", samples_s_);
    f_.set("mini_trainer_sync_share", k::gauge,
           "Fraction of this rank's step time spent in gradient sync (same window).", share_);
    f_.set("mini_trainer_steps_total", k::counter, "Training steps this process ran.",
           static_cast<double>(steps_));
    f_.set("mini_trainer_epoch", k::gauge, "Epochs completed.", static_cast<double>(epoch_));
    f_.set("mini_trainer_test_accuracy", k::gauge, "Test accuracy after the last epoch.",
           test_acc_);
    f_.write();  // best effort: a full disk must not stop the training
    win_t0_ = now, win_steps_ = 0, win_step_ = win_sync_ = 0;
  }

  gradsync::observe::metrics_file f_;
  std::size_t batch_, steps_ = 0, win_steps_ = 0, epoch_ = 0;
  double win_step_ = 0, win_sync_ = 0, samples_s_ = 0, share_ = 0, test_acc_ = 0;
  std::chrono::steady_clock::time_point win_t0_ = std::chrono::steady_clock::now();
};

}  // namespace mini_trainer
