// SPDX-License-Identifier: Apache-2.0
// The measurement loop, written once for every implementation (gradsync rows and peers):
// per size, warm up, time each iteration between barriers, keep the slowest rank's time
// per iteration, report the median, and count wrong elements from exact inputs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../common/exact_fast.hpp"
#include "../common/group.hpp"
#include "../common/report.hpp"
#include "gradsync/testing/exact_inputs.hpp"
#include "options.hpp"

namespace gradsync::bench {

/// The identifying columns of a table's rows.
inline row make_label(std::string kind, std::string impl, std::string transport, std::string algo,
                      std::string mpi, const options& o) {
  row r;
  r.kind = std::move(kind);
  r.impl = std::move(impl);
  r.transport = std::move(transport);
  r.algo = std::move(algo);
  r.mpi = std::move(mpi);
  r.type = type_label(o.type);
  r.op = std::string(op_name(o.op));
  return r;
}

/// One implementation under test for element type T.
template <class T>
struct subject {
  row label;  ///< kind, impl, transport, algo, mpi, type, op (sizes and times are filled in)
  /// Called once per size before warm-up (optional): set-up that is not timed.
  std::function<void(std::span<T>)> prepare;
  /// One in-place allreduce of the span.
  std::function<void(std::span<T>)> run;
  /// Where the sweep's buffer lives (optional; default: a std::vector): returns `count`
  /// elements that stay valid for the whole sweep (e.g. a registered shm buffer).
  std::function<std::span<T>(std::size_t count)> buffer;
  /// false: run() computes no allreduce (a probe such as p2p_exchange); #wrong stays -1.
  bool checked = true;
};

/// Rows of a sweep and how many checked elements were wrong in total.
struct sweep_result {
  std::vector<row> rows;
  std::uint64_t wrong = 0;
};

/// Runs subjects `ss` over every size of the sweep on every rank of `g` (collective).
/// With more than one subject, each size times them iteration by iteration in turn
/// (A, B, A, B, ...; each between barriers), so that a change of the machine's speed
/// during the run hits all of them alike: their ratio is then a fair one even on a
/// noisy host. Rank 0 prints one table per subject and appends the rows to `csv`.
template <class T>
std::vector<sweep_result> sweep(group& g, const options& o, std::span<subject<T>* const> ss,
                                csv_writer& csv) {
  using clk = std::chrono::steady_clock;
  const std::size_t n = g.size(), me = g.rank(), ns = ss.size();
  const std::vector<std::size_t> sizes = sweep_sizes(o, sizeof(T));
  std::vector<sweep_result> res(ns);
  if (sizes.empty() || ns == 0) return res;
  const auto sweep_start = clk::now();
  std::vector<std::vector<T>> own(ns);
  std::vector<std::span<T>> buf(ns);
  for (std::size_t k = 0; k < ns; ++k) {
    if (ss[k]->buffer) {
      buf[k] = ss[k]->buffer(sizes.back() / sizeof(T));
    } else {
      own[k].resize(sizes.back() / sizeof(T));
      buf[k] = own[k];
    }
  }
  const exact_pattern<T> pattern(o.op, me, n);
  auto title = [&](const subject<T>& s) {
    std::string t = s.label.impl;
    if (s.label.transport != "-") t += "  transport=" + s.label.transport;
    if (s.label.algo != "-") t += "  algo=" + s.label.algo;
    if (s.label.mpi != "none") t += "  mpi=" + s.label.mpi;
    t += "  ranks=" + std::to_string(n);
    if (ns > 1) t += "  (timed interleaved with " + std::to_string(ns - 1) + " other)";
    return t;
  };
  // One subject prints each row as it is measured (progress on long sweeps); several
  // print their tables at the end, one after the other.
  if (me == 0 && ns == 1) print_table_header(title(*ss[0]));
  for (const std::size_t bytes : sizes) {
    const std::size_t count = bytes / sizeof(T);
    const std::size_t iters = iters_for(o, bytes);
    std::vector<std::span<T>> data(ns);
    std::vector<std::vector<double>> times(ns, std::vector<double>(iters));
    for (std::size_t k = 0; k < ns; ++k) {
      data[k] = std::span<T>(buf[k].data(), count);
      if (ss[k]->prepare) ss[k]->prepare(data[k]);
      pattern.fill(data[k]);
      for (std::size_t i = 0; i < warmup_for(o, iters); ++i) ss[k]->run(data[k]);
    }
    for (std::size_t i = 0; i < iters; ++i) {
      for (std::size_t k = 0; k < ns; ++k) {
        g.barrier();
        const auto t0 = clk::now();
        ss[k]->run(data[k]);
        times[k][i] = std::chrono::duration<double, std::micro>(clk::now() - t0).count();
      }
    }
    for (std::size_t k = 0; k < ns; ++k) {
      const subject<T>& s = *ss[k];
      g.max_all(times[k]);  // the slowest rank's time, per iteration
      long long wrong = -1;
      if (o.check && s.checked) {
        pattern.fill(data[k]);
        g.barrier();
        s.run(data[k]);
        if (o.corrupt && s.label.kind == "gradsync" && me + 1 == n)
          data[k][count / 2] = testing::from_double<T>(-99.0);  // self-test
        const std::size_t mine = pattern.count_wrong(data[k]);
        const std::uint64_t total = g.sum_all(mine);
        wrong = static_cast<long long>(total);
        res[k].wrong += total;
      }
      row r = s.label;
      r.ranks = n;
      r.bytes = bytes;
      r.count = count;
      r.iters = iters;
      double lo = times[k][0];
      for (double t : times[k]) lo = t < lo ? t : lo;
      r.time_us = median(times[k]);
      r.min_us = lo;
      r.algbw = r.time_us > 0 ? static_cast<double>(bytes) / (r.time_us * 1e3) : 0;  // GB/s
      r.busbw = r.algbw * busbw_factor(n);
      r.wrong = wrong;
      res[k].rows.push_back(r);
      if (me == 0 && ns == 1) {
        print_table_row(r);
        csv.append(r);
      }
    }
  }
  g.barrier();
  const double wall = std::chrono::duration<double>(clk::now() - sweep_start).count();
  if (me == 0) {
    for (std::size_t k = 0; k < ns; ++k) {
      const subject<T>& s = *ss[k];
      if (ns > 1) {
        print_table_header(title(s));
        for (const row& r : res[k].rows) {
          print_table_row(r);
          csv.append(r);
        }
      }
      std::printf("# sweep wall time (warm-up, timing and check of every size%s): %.2f s\n",
                  ns > 1 ? ", all interleaved tables" : "", wall);
      row r = s.label;  // kind "sweep": time_us is the whole table's wall time
      r.kind = "sweep";
      r.ranks = n;
      r.time_us = r.min_us = wall * 1e6;
      csv.append(r);
    }
  }
  return res;
}

/// One subject on its own (the usual nccl-tests-style table).
template <class T>
sweep_result sweep(group& g, const options& o, subject<T>& s, csv_writer& csv) {
  subject<T>* one[] = {&s};
  return std::move(sweep(g, o, std::span<subject<T>* const>(one), csv).front());
}

}  // namespace gradsync::bench
