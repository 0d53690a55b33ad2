// SPDX-License-Identifier: Apache-2.0
// The measurements of fusion_perf, written once against any transport: a model's
// gradients synchronized unfused (one allreduce per tensor), fused in packed buckets of
// several sizes, as one grouped call, and zero-copy; and a synthetic backward pass
// (per-layer compute, busy-loop or sleep) with and without overlap.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "../common/group.hpp"
#include "models.hpp"

namespace gradsync::bench {

struct perf_options {
  std::vector<std::string> transports;
  std::size_t ranks = 2;  // local transport only
  int warmup = 2, reps = 7;
  int reps_small = 21;  // for models under 64 MiB (cheap steps, noisy machine)
  std::vector<std::string> models{"small", "resnet50", "bert"};
  std::size_t bert_layers = 12;
  std::vector<double> compute_ratios{1.0, 2.0};  // compute = ratio x fused comm time
  bool overlap = true;
  std::string timeline;  // prefix: write timelines of the overlap runs
  int progress_nice = allreducer_options{}.progress_nice;  // of every allreducer's thread
};

/// One result row.
struct row {
  std::string transport, model, mode;
  std::size_t tensors = 0, buckets = 0, bytes = 0;
  double median_s = 0, min_s = 0, vs = 0;  // vs: unfused time / this time
  std::size_t wrong = 0;
  double pack_s = 0;    // median pack+unpack seconds of the step (rank 0)
  bool checked = true;  // false: a floor row (no allreduce, #wrong not applicable)
};

using algo_t = algo::auto_select;
using steady = std::chrono::steady_clock;

inline double secs(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Runs `step` warmup+reps times between barriers; returns {median, min} over reps of
/// the slowest rank's time.
inline std::pair<double, double> time_steps(group& g, const perf_options& o,
                                            const std::function<void()>& step) {
  std::vector<double> ts;
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    g.barrier();
    const auto t0 = steady::now();
    step();
    const auto t1 = steady::now();
    if (i >= o.warmup) ts.push_back(secs(t0, t1));
  }
  g.max_all(ts);
  std::sort(ts.begin(), ts.end());
  return {ts[ts.size() / 2], ts.front()};
}

/// Busy-loops (or sleeps) for `s` seconds: one layer's backward compute.
inline void compute_for(double s, bool busy) {
  if (s <= 0) return;
  const auto until = steady::now() +
                     std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(s));
  if (!busy) {
    std::this_thread::sleep_until(until);
    return;
  }
  volatile unsigned x = 1;
  while (steady::now() < until) {
    for (int i = 0; i < 64; ++i) x = x * 1664525u + 1013904223u;
  }
}

template <class Tr>
class fusion_bench {
 public:
  fusion_bench(Tr& t, group& g, const perf_options& o, std::string tname)
      : t_(t), g_(g), o_(o), tname_(std::move(tname)) {}

  /// Allocates the model's gradient tensors (float32, in this process's memory).
  void prepare(const model& m) {
    if (model_ == m.name) return;
    const std::size_t n = m.counts.size();
    own_.assign(n, {});
    spans_.clear();
    first_.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      own_[i].assign(m.counts[i], 0.0f);
      spans_.push_back(std::span<float>(own_[i]));
      if (i) first_[i] = first_[i - 1] + m.counts[i - 1];
    }
    bytes_ = m.params() * sizeof(float);
    model_ = m.name;
  }

  void run_model(const model& m, std::vector<row>& rows) {
    prepare(m);
    const std::size_t n = m.counts.size();
    const std::size_t base = rows.size();

    // Unfused: the cheapest per-tensor path, the free function, backward order.
    {
      auto step = [&] {
        for (std::size_t i = n; i-- > 0;) gradsync::allreduce<algo_t>(t_, spans_[i], op::avg);
      };
      row r = timed("unfused", step, n);
      fill();
      step();
      r.wrong = check();
      rows.push_back(r);
    }
    // Many small buckets: what each bucket's collective costs beyond its bytes.
    if (m.name == "1000x4KiB") registered<fusion::bucket<64 << 10>>("bucket 64KiB", rows);
    registered<fusion::bucket<1 << 20>>("bucket 1MiB", rows);
    registered<fusion::bucket<4 << 20>>("bucket 4MiB", rows);
    registered<fusion::bucket<25 << 20>>("bucket 25MiB", rows);
    {
      allreducer<Tr, algo_t, fusion::bucket<25 << 20>> ar(t_, quiet());
      auto step = [&] { ar.allreduce(spans_, op::avg); };
      row r = timed("grouped 25MiB", step, n);
      r.buckets = ar.last_stats().buckets;
      fill();
      step();
      r.wrong = check();
      rows.push_back(r);
    }
    zero_copy<fusion::zero_copy<4 << 20>>("zero-copy 4MiB", rows);
    zero_copy<fusion::zero_copy<25 << 20>>("zero-copy 25MiB", rows);
    // The same with compress::bf16: half the bytes on the wire, plus two conversions.
    // Only for a power-of-two rank count, where avg's inputs divided by n are still exact
    // in bfloat16 (testing/exact_inputs.hpp), so #wrong can stay 0.
    const std::size_t ranks = t_.size();
    if ((ranks & (ranks - 1)) == 0) {
      zero_copy<fusion::zero_copy<25 << 20>, compress::bf16>("zero-copy 25MiB bf16", rows);
    }
    for (std::size_t k = base; k < rows.size(); ++k)
      rows[k].vs = rows[base].median_s / rows[k].median_s;
  }

  /// The pair the 10x target compares, timed fairly: one step unfused, then one step
  /// zero-copy 25 MiB, alternately, each between barriers, so that a change of the
  /// machine's speed during the run hits both alike (rows "... (interleaved)"; vs =
  /// unfused median / zero-copy median of the same run).
  void run_pair(const model& m, std::vector<row>& rows) {
    prepare(m);
    allreducer<Tr, algo_t, fusion::zero_copy<25 << 20>> ar(t_, quiet());
    for (auto s : spans_) ar.template add<float>(s.size());
    ar.commit(op::avg, element_types<float>{});
    std::vector<std::span<float>> views;
    for (std::size_t i = 0; i < spans_.size(); ++i) views.push_back(ar.template view<float>(i));
    auto unfused = [&] {
      for (std::size_t i = spans_.size(); i-- > 0;) {
        gradsync::allreduce<algo_t>(t_, spans_[i], op::avg);
      }
    };
    auto fused = [&] {
      for (std::size_t i = views.size(); i-- > 0;) ar.ready(i);
      ar.wait();
    };
    // The floor row, timed in the same turns: the model's bytes moved once with no
    // allreduce around them. Each rank's result depends on all of the peer's S bytes, so
    // a fused step must at least bring S bytes in: over MPI an exchange (set_exchange),
    // in shared memory a copy. Not a strict bound (private source and target buffers
    // have their own cache footprint) but the fused step cannot be far below it, so
    // unfused / floor caps the fused-vs-unfused ratio on this machine.
    std::vector<float> from(bytes_ / sizeof(float), 1.0f), to(from.size());
    const std::string floor_mode =
        "floor: " + (exchange_ ? exchange_name_ : std::string("memcpy")) + " (interleaved)";
    auto floor_step = [&] {
      if (exchange_) {
        exchange_(std::span<const float>(from), std::span<float>(to));
      } else {
        std::memcpy(to.data(), from.data(), bytes_);
      }
    };
    const int reps = bytes_ < (std::size_t{64} << 20) ? std::max(o_.reps, o_.reps_small) : o_.reps;
    std::vector<double> tu, tf, tl;
    for (int i = 0; i < o_.warmup + reps; ++i) {
      g_.barrier();
      const auto t0 = steady::now();
      unfused();
      const auto t1 = steady::now();
      g_.barrier();
      const auto t2 = steady::now();
      fused();
      const auto t3 = steady::now();
      if (i >= o_.warmup) {
        tu.push_back(secs(t0, t1));
        tf.push_back(secs(t2, t3));
      }
      g_.barrier();
      const auto t4 = steady::now();
      floor_step();
      const auto t5 = steady::now();
      if (i >= o_.warmup) tl.push_back(secs(t4, t5));
    }
    g_.max_all(tu);
    g_.max_all(tf);
    g_.max_all(tl);
    auto mk = [&](const std::string& mode, std::vector<double>& ts, std::size_t buckets) {
      std::sort(ts.begin(), ts.end());
      row r = labelled(mode, buckets);
      r.median_s = ts[ts.size() / 2];
      r.min_s = ts.front();
      return r;
    };
    row ru = mk("unfused (interleaved)", tu, spans_.size());
    row rf = mk("zero-copy 25MiB (interleaved)", tf, ar.plan().buckets.size());
    fill();
    unfused();
    ru.wrong = check();
    std::swap(views, spans_);
    fill();
    fused();
    rf.wrong = check();
    std::swap(views, spans_);
    ru.vs = 1.0;
    rf.vs = ru.median_s / rf.median_s;
    rows.push_back(ru);
    rows.push_back(rf);
    row rl = mk(floor_mode, tl, 0);
    rl.vs = ru.median_s / rl.median_s;  // the most any fused step could gain here
    rl.checked = false;
    rows.push_back(rl);
  }

  /// run_pair's floor for a transport whose bytes travel through a library (default: a
  /// memcpy): `f(from, to)` sends `from` to the next rank and receives `to` from the
  /// previous one (e.g. MPI_Sendrecv). `name` labels the row ("floor: <name> (interleaved)").
  void set_exchange(std::string name,
                    std::function<void(std::span<const float>, std::span<float>)> f) {
    exchange_name_ = std::move(name);
    exchange_ = std::move(f);
  }

  /// Synthetic backward pass over `m` with bucket<4 MiB> (a small last bucket keeps the
  /// tail after the last layer short): compute-only, comm-only, compute then comm (no
  /// overlap), and compute with ready() per layer (overlap).
  void run_overlap(const model& m, double ratio, bool busy, std::vector<row>& rows) {
    using F = fusion::bucket<4 << 20>;
    prepare(m);
    allreducer_options ao = quiet();
    if (!o_.timeline.empty()) {
      ao.timeline = o_.timeline + "_" + tname_ + "_" + m.name + "_" + (busy ? "busy" : "sleep") +
                    "_x" + std::to_string(static_cast<int>(ratio * 10)) + ".json";
    }
    allreducer<Tr, algo_t, F> ar(t_, ao);
    const std::size_t n = m.counts.size();
    for (auto s : spans_) ar.add(s);
    ar.commit(op::avg, element_types<float>{});
    auto comm = [&] {
      for (std::size_t i = n; i-- > 0;) ar.ready(i);
      ar.wait();
    };
    const auto [comm_s, comm_min] = time_steps(g_, o_, comm);
    (void)comm_min;
    // Per-layer compute proportional to the layer's parameters (plus a floor).
    const double total = ratio * comm_s;
    std::vector<double> c(n);
    for (std::size_t i = 0; i < n; ++i) {
      c[i] = total * (0.2 / static_cast<double>(n) +
                      0.8 * static_cast<double>(m.counts[i]) / static_cast<double>(m.params()));
    }
    auto compute = [&] {
      for (std::size_t i = n; i-- > 0;) compute_for(c[i], busy);
    };
    auto sequential = [&] {
      compute();
      comm();
    };
    auto overlapped = [&] {
      for (std::size_t i = n; i-- > 0;) {
        compute_for(c[i], busy);
        ar.ready(i);
      }
      ar.wait();
    };
    const std::string tag = std::string(busy ? "busy" : "sleep") + " x" + fmt(ratio);
    const auto cpu = time_steps(g_, o_, compute);
    const auto seq = time_steps(g_, o_, sequential);
    const auto ovl = time_steps(g_, o_, overlapped);
    fill();
    overlapped();
    const std::size_t wrong = check();
    auto mk = [&](const std::string& mode, std::pair<double, double> t) {
      row r;
      r.transport = tname_;
      r.model = m.name;
      r.mode = mode;
      r.tensors = n;
      r.buckets = ar.plan().buckets.size();
      r.bytes = bytes_;
      r.median_s = t.first;
      r.min_s = t.second;
      r.wrong = wrong;
      return r;
    };
    rows.push_back(mk("compute " + tag, cpu));
    rows.push_back(mk("comm 4MiB", {comm_s, comm_min}));
    rows.push_back(mk("no-overlap " + tag, seq));
    rows.push_back(mk("overlap " + tag, ovl));
    const double bound = std::max(cpu.first, comm_s);
    rows.back().vs = ovl.first / bound;  // the target: <= 1.15
    rows[rows.size() - 2].vs = seq.first / bound;
  }

 private:
  static std::string fmt(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", v);
    return b;
  }
  allreducer_options quiet() const {
    allreducer_options o;
    o.timeline = "";
    o.progress_nice = o_.progress_nice;
    return o;
  }

  template <class F>
  void registered(const std::string& mode, std::vector<row>& rows) {
    allreducer<Tr, algo_t, F> ar(t_, quiet());
    for (auto s : spans_) ar.add(s);
    ar.commit(op::avg, element_types<float>{});
    auto step = [&] {
      for (std::size_t i = spans_.size(); i-- > 0;) ar.ready(i);
      ar.wait();
    };
    row r = timed(mode, step, spans_.size());
    r.buckets = ar.plan().buckets.size();
    r.pack_s = ar.last_stats().pack_seconds;
    fill();
    step();
    r.wrong = check();
    rows.push_back(r);
  }

  template <class F, class C = compress::none>
  void zero_copy(const std::string& mode, std::vector<row>& rows) {
    allreducer<Tr, algo_t, F, C> ar(t_, quiet());
    for (auto s : spans_) ar.template add<float>(s.size());
    ar.commit(op::avg, element_types<float>{});
    std::vector<std::span<float>> views;
    for (std::size_t i = 0; i < spans_.size(); ++i) views.push_back(ar.template view<float>(i));
    auto step = [&] {
      for (std::size_t i = views.size(); i-- > 0;) ar.ready(i);
      ar.wait();
    };
    row r = timed(mode, step, spans_.size());
    r.buckets = ar.plan().buckets.size();
    r.pack_s = ar.last_stats().pack_seconds;
    std::swap(views, spans_);
    fill();
    step();
    r.wrong = check();
    std::swap(views, spans_);
    rows.push_back(r);
  }

  /// A row of this transport and model with its identifying columns filled in.
  row labelled(const std::string& mode, std::size_t buckets) const {
    row r;
    r.transport = tname_;
    r.model = model_;
    r.mode = mode;
    r.tensors = spans_.size();
    r.buckets = buckets;
    r.bytes = bytes_;
    return r;
  }

  row timed(const std::string& mode, const std::function<void()>& step, std::size_t buckets) {
    row r = labelled(mode, buckets);
    perf_options o = o_;
    if (bytes_ < (std::size_t{64} << 20)) o.reps = std::max(o.reps, o.reps_small);
    const auto [med, mn] = time_steps(g_, o, step);
    r.median_s = med;
    r.min_s = mn;
    return r;
  }

  void fill() {
    for (std::size_t i = 0; i < spans_.size(); ++i) {
      testing::fill_inputs(spans_[i], reduce_op::avg, t_.rank(), t_.size(), first_[i]);
    }
  }
  std::size_t check() {
    std::size_t w = 0;
    for (std::size_t i = 0; i < spans_.size(); ++i) {
      w += testing::count_wrong(std::span<const float>(spans_[i]), reduce_op::avg, t_.size(),
                                first_[i]);
    }
    return static_cast<std::size_t>(g_.sum_all(w));
  }

  Tr& t_;
  group& g_;
  const perf_options& o_;
  std::string tname_, model_;
  std::vector<std::vector<float>> own_;
  std::vector<std::span<float>> spans_;
  std::vector<std::size_t> first_;
  std::size_t bytes_ = 0;
  std::string exchange_name_;
  std::function<void(std::span<const float>, std::span<float>)> exchange_;
};

}  // namespace gradsync::bench
