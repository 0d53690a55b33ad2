// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics of one rank, in the text exposition format that node-exporter's
// textfile collector reads. Enabled by GRADSYNC_METRICS=DIR (or allreducer_options::
// metrics): each writer owns DIR/<job>.rank<R>.prom (DIR/<job>.<id>.rank<R>.prom when the
// launcher gives a job id, so two jobs on one node keep apart) and rewrites it whole,
// atomically (a temporary file of its own renamed over it, so a scrape never sees half a
// file), at most every GRADSYNC_METRICS_INTERVAL seconds (default 10: the writer asks
// due()) and at the end.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/observe/stats.hpp"

namespace gradsync::observe {

/// One rank's metrics file: set values, then write() (when due(), from a loop).
class metrics_file {
 public:
  /// The Prometheus metric type.
  enum class kind {
    counter,  ///< only grows (totals)
    gauge     ///< any value (rates, the last epoch)
  };

  metrics_file() = default;
  /// Writes `DIR/<job>.rank<rank>.prom` when `dir` is not empty, or
  /// `DIR/<job>.ID.rank<rank>.prom` when `job_id` (ID: the launcher's, env_job_id()) is
  /// not empty; `labels` (such as `transport="mpi",algorithm="ring"`) go on every sample,
  /// after rank="R" (and a job_id label, so two jobs' samples stay two series).
  metrics_file(const std::string& dir, const std::string& job, std::size_t rank,
               const std::string& labels = {}, double interval_s = env_interval(),
               const std::string& job_id = env_job_id())
      : path_(dir.empty() ? std::string()
                          : dir + "/" + job + (job_id.empty() ? "" : "." + file_part(job_id)) +
                                ".rank" + std::to_string(rank) + ".prom"),
        // Per process and per writer: another job's, or another writer's, temporary
        // renamed over ours would publish its samples under our name.
        tmp_(path_.empty() ? std::string()
                           : path_ + "." + std::to_string(::getpid()) + "-" +
                                 std::to_string(next_writer()) + ".tmp"),
        labels_("rank=\"" + std::to_string(rank) + "\"" +
                (job_id.empty() ? "" : ",job_id=\"" + escape(job_id) + "\"") +
                (labels.empty() ? "" : "," + labels)),
        interval_(std::chrono::duration<double>(interval_s)) {}
  metrics_file(const metrics_file&) = delete;
  metrics_file& operator=(const metrics_file&) = delete;

  /// GRADSYNC_METRICS (a directory), or "" when unset.
  static std::string env_dir() {
    const char* s = std::getenv("GRADSYNC_METRICS");
    return s ? std::string(s) : std::string();
  }
  /// This job's id where a launcher gives one: GRADSYNC_SHM_JOB, else Open MPI's
  /// PMIX_NAMESPACE (or OMPI_MCA_ess_base_jobid), else Slurm's SLURM_JOB_ID.SLURM_STEP_ID
  /// (an srun task); "" otherwise (the file keeps its plain name).
  static std::string env_job_id() {
    for (const char* v : {"GRADSYNC_SHM_JOB", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
      const char* s = std::getenv(v);
      if (s && *s) return s;
    }
    const char* id = std::getenv("SLURM_JOB_ID");
    const char* step = std::getenv("SLURM_STEP_ID");
    return id && *id && step && *step ? std::string(id) + "." + step : std::string();
  }
  /// GRADSYNC_METRICS_INTERVAL in seconds (>= 0, default 10); another value is an
  /// invalid_argument error naming the variable.
  static double env_interval() {
    return gradsync::detail::env_seconds("GRADSYNC_METRICS_INTERVAL", seconds_d{10}, true).count();
  }
  /// `Name` as Prometheus allows it: [a-zA-Z_:][a-zA-Z0-9_:]*, other characters as '_'.
  static std::string sanitize(std::string_view name) {
    std::string o(name);
    for (std::size_t i = 0; i < o.size(); ++i) {
      const char c = o[i];
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                      (i > 0 && c >= '0' && c <= '9');
      if (!ok) o[i] = '_';
    }
    return o;
  }
  /// A label value with \, " and newline escaped, as the format requires.
  static std::string escape(std::string_view v) {
    std::string o;
    for (char c : v) {
      if (c == '\\') {
        o += "\\\\";
      } else if (c == '"') {
        o += "\\\"";
      } else if (c == '\n') {
        o += "\\n";
      } else {
        o += c;
      }
    }
    return o;
  }

  /// Whether a directory was given (otherwise every call does nothing).
  bool enabled() const { return !path_.empty(); }
  /// The file this rank writes.
  const std::string& path() const { return path_; }
  /// The temporary it writes first (unique to this writer and process).
  const std::string& temporary() const { return tmp_; }

  /// Sets metric `name` (with optional extra labels, e.g. `kind="timeout"`) to `value`.
  void set(std::string_view name, kind k, std::string_view help, double value,
           std::string_view labels = {}) {
    if (!enabled()) return;
    std::lock_guard lk(m_);
    for (auto& s : samples_) {
      if (s.name == name && s.labels == labels) {
        s.value = value;
        return;
      }
    }
    samples_.push_back({std::string(name), std::string(labels), std::string(help), k, value});
  }

  /// Whether the interval has passed since the last write (always before the first).
  bool due() const {
    if (!enabled()) return false;
    std::lock_guard lk(m_);
    return !written_once_ || std::chrono::steady_clock::now() - last_ >= interval_;
  }

  /// Writes the file now (a temporary beside it, renamed over it); false when it cannot.
  bool write() {
    if (!enabled()) return true;
    std::lock_guard lk(m_);
    last_ = std::chrono::steady_clock::now();
    written_once_ = true;
    const std::string& tmp = tmp_;
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) return false;
    std::vector<bool> headed(samples_.size(), false);
    for (std::size_t i = 0; i < samples_.size(); ++i) {
      if (headed[i]) continue;
      const auto& s = samples_[i];
      // HELP and TYPE once per family, then every sample of it together.
      std::fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", s.name.c_str(), s.help.c_str(),
                   s.name.c_str(), s.k == kind::counter ? "counter" : "gauge");
      for (std::size_t j = i; j < samples_.size(); ++j) {
        const auto& t = samples_[j];
        if (t.name != s.name) continue;
        headed[j] = true;
        std::fprintf(f, "%s{%s%s%s} %.17g\n", t.name.c_str(), labels_.c_str(),
                     t.labels.empty() ? "" : ",", t.labels.c_str(), t.value);
      }
    }
    const bool ok = std::fclose(f) == 0 && std::rename(tmp.c_str(), path_.c_str()) == 0;
    if (!ok) std::remove(tmp.c_str());  // a full disk leaves no half file behind
    return ok;
  }

 private:
  struct sample {
    std::string name, labels, help;
    kind k;
    double value;
  };

  // A job id as part of a file name: '/' and other odd characters become '_'.
  static std::string file_part(std::string_view id) {
    std::string o(id);
    for (char& c : o) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
      if (!ok) c = '_';
    }
    return o;
  }
  static std::size_t next_writer() {
    static std::atomic<std::size_t> n{0};
    return n.fetch_add(1, std::memory_order_relaxed);
  }

  std::string path_, tmp_, labels_;
  std::chrono::duration<double> interval_{10};
  std::chrono::steady_clock::time_point last_{};
  bool written_once_ = false;
  mutable std::mutex m_;
  std::vector<sample> samples_;
};

/// An allreducer's samples (totals `c`, failed buckets by errc in `errors`, busbw of the
/// window of `window_bytes` in `window_seconds`), then the write. A plain function: the
/// allreducer's instantiations share one copy.
inline bool write_allreducer_metrics(metrics_file& f, const cumulative_stats& c,
                                     std::span<const std::size_t> errors, std::size_t ranks,
                                     std::size_t window_bytes, double window_seconds) {
  using k = metrics_file::kind;
  auto d = [](std::size_t v) { return static_cast<double>(v); };
  f.set("gradsync_calls_total", k::counter, "Completed allreducer calls (steps, lists).",
        d(c.calls));
  f.set("gradsync_buckets_total", k::counter, "Collectives issued (buckets).", d(c.buckets));
  f.set("gradsync_bytes_in_total", k::counter, "Payload bytes reduced.", d(c.bytes_in));
  f.set("gradsync_bytes_wire_total", k::counter,
        "Bytes this rank sent (measured, or the ring model where not traced).", d(c.bytes_wire));
  f.set("gradsync_bytes_encoded_total", k::counter,
        "Bytes the compression handed to the collectives.", d(c.bytes_encoded));
  f.set("gradsync_collective_seconds_total", k::counter, "Seconds in collectives.", c.seconds);
  f.set("gradsync_pack_seconds_total", k::counter, "Seconds packing buckets.", c.pack_seconds);
  f.set("gradsync_compress_seconds_total", k::counter, "Seconds in codec passes.",
        c.compress_seconds);
  f.set("gradsync_stalls_total", k::counter,
        "Collectives that ran longer than the stall threshold (GRADSYNC_STALL_WARN).", d(c.stalls));
  const double n = d(ranks);
  f.set(
      "gradsync_busbw_gigabytes_per_second", k::gauge,
      "Bus bandwidth of the calls since the last write, GB/s (algbw * 2(n-1)/n).",
      window_seconds > 0 && n > 1 ? d(window_bytes) / window_seconds / 1e9 * 2 * (n - 1) / n : 0.0);
  for (std::size_t e = 0; e < errors.size(); ++e) {
    const std::string kind = e == 0 ? "other" : std::string(errc_name(static_cast<errc>(e)));
    f.set("gradsync_errors_total", k::counter, "Failed buckets, by error code.", d(errors[e]),
          "kind=\"" + kind + "\"");
  }
  return f.write();
}

}  // namespace gradsync::observe
