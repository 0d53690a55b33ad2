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
};

/// Rows of a sweep and how many checked elements were wrong in total.
struct sweep_result {
  std::vector<row> rows;
  std::uint64_t wrong = 0;
};

/// Runs subject `s` over every size of the sweep on every rank of `g` (collective).
/// Rank 0 prints the table and appends the rows to `csv`.
template <class T>
sweep_result sweep(group& g, const options& o, subject<T>& s, csv_writer& csv) {
  using clk = std::chrono::steady_clock;
  const std::size_t n = g.size(), me = g.rank();
  const std::vector<std::size_t> sizes = sweep_sizes(o, sizeof(T));
  sweep_result res;
  if (sizes.empty()) return res;
  const auto sweep_start = clk::now();
  std::vector<T> own;
  std::span<T> buf;
  if (s.buffer) {
    buf = s.buffer(sizes.back() / sizeof(T));
  } else {
    own.resize(sizes.back() / sizeof(T));
    buf = own;
  }
  const exact_pattern<T> pattern(o.op, me, n);
  if (me == 0) {
    std::string title = s.label.impl;
    if (s.label.transport != "-") title += "  transport=" + s.label.transport;
    if (s.label.algo != "-") title += "  algo=" + s.label.algo;
    if (s.label.mpi != "none") title += "  mpi=" + s.label.mpi;
    title += "  ranks=" + std::to_string(n);
    print_table_header(title);
  }
  for (const std::size_t bytes : sizes) {
    const std::size_t count = bytes / sizeof(T);
    const std::span<T> data(buf.data(), count);
    if (s.prepare) s.prepare(data);
    pattern.fill(data);
    const std::size_t iters = iters_for(o, bytes);
    for (std::size_t i = 0; i < warmup_for(o, iters); ++i) s.run(data);
    std::vector<double> times(iters);
    for (std::size_t i = 0; i < iters; ++i) {
      g.barrier();
      const auto t0 = clk::now();
      s.run(data);
      times[i] = std::chrono::duration<double, std::micro>(clk::now() - t0).count();
    }
    g.max_all(times);  // the slowest rank's time, per iteration
    long long wrong = -1;
    if (o.check) {
      pattern.fill(data);
      g.barrier();
      s.run(data);
      if (o.corrupt && s.label.kind == "gradsync" && me + 1 == n)
        data[count / 2] = testing::from_double<T>(-99.0);  // self-test
      const std::size_t mine = pattern.count_wrong(data);
      const std::uint64_t total = g.sum_all(mine);
      wrong = static_cast<long long>(total);
      res.wrong += total;
    }
    row r = s.label;
    r.ranks = n;
    r.bytes = bytes;
    r.count = count;
    r.iters = iters;
    double lo = times[0];
    for (double t : times) lo = t < lo ? t : lo;
    r.time_us = median(times);
    r.min_us = lo;
    r.algbw = r.time_us > 0 ? static_cast<double>(bytes) / (r.time_us * 1e3) : 0;  // GB/s
    r.busbw = r.algbw * busbw_factor(n);
    r.wrong = wrong;
    if (me == 0) {
      print_table_row(r);
      csv.append(r);
    }
    res.rows.push_back(r);
  }
  g.barrier();
  const double wall = std::chrono::duration<double>(clk::now() - sweep_start).count();
  if (me == 0) {
    std::printf("# sweep wall time (warm-up, timing and check of every size): %.2f s\n", wall);
    row r = s.label;  // kind "sweep": time_us is the whole table's wall time
    r.kind = "sweep";
    r.ranks = n;
    r.time_us = r.min_us = wall * 1e6;
    csv.append(r);
  }
  return res;
}

}  // namespace gradsync::bench
