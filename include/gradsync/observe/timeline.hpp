// SPDX-License-Identifier: Apache-2.0
// A per-rank Chrome-trace timeline (open in Perfetto or chrome://tracing). Enabled by
// GRADSYNC_TIMELINE=path (or allreducer_options::timeline); rank R writes
// path-with-".rankR" inserted before a trailing ".json" (trace.json -> trace.rank0.json).
// Events are kept in memory (at most max_events) and written when the allreducer is
// destroyed or write() is called. Timestamps are microseconds of the steady clock, so
// the files of the ranks of one host line up when loaded together.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gradsync/core/rank_file.hpp"

namespace gradsync::observe {

/// Which track of a rank an event is drawn on. codec_wire: a codec's pieces on the wire
/// from its helper thread (compress/pieces.hpp), beside the passes on the bucket's track:
/// events of one track must nest, and those two overlap in time.
enum class track : int { caller = 1, progress = 2, codec_wire = 3 };

class timeline {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr std::size_t max_events = std::size_t{1} << 21;

  timeline() = default;
  /// Records into memory when `path` is not empty; writes the rank's file on write().
  timeline(const std::string& path, std::size_t rank)
      : path_(path.empty() ? std::string() : path_for(path, rank)), rank_(rank) {}
  timeline(const timeline&) = delete;
  timeline& operator=(const timeline&) = delete;

  /// GRADSYNC_TIMELINE, or "" when unset.
  static std::string env_path() { return gradsync::detail::env_or_empty("GRADSYNC_TIMELINE"); }
  /// trace.json -> trace.rank3.json; trace -> trace.rank3.json.
  static std::string path_for(const std::string& path, std::size_t rank) {
    return gradsync::detail::rank_json_path(path, rank);
  }

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  /// A complete event ("ph":"X") from `begin` to `end`; `args` is a JSON object body
  /// such as "\"bucket\":3" (may be empty).
  void complete(std::string_view name, track tr, time_point begin, time_point end,
                std::string args = {}) {
    if (!enabled()) return;
    std::lock_guard lk(m_);
    if (events_.size() >= max_events) {
      ++dropped_;
      return;
    }
    events_.push_back(
        {std::string(name), 'X', tr, ns(begin), ns(end) - ns(begin), std::move(args)});
  }
  /// complete() with its arguments from `args()`, called only when the timeline is on.
  template <class Args>
  void complete_with(std::string_view name, track tr, time_point begin, time_point end,
                     Args&& args) {
    if (enabled()) complete(name, tr, begin, end, args());
  }
  /// An instant event ("ph":"i").
  void instant(std::string_view name, track tr, time_point at, std::string args = {}) {
    if (!enabled()) return;
    std::lock_guard lk(m_);
    if (events_.size() >= max_events) {
      ++dropped_;
      return;
    }
    events_.push_back({std::string(name), 'i', tr, ns(at), 0, std::move(args)});
  }

  /// Events recorded so far (for tests).
  std::size_t size() const {
    std::lock_guard lk(m_);
    return events_.size();
  }

  /// Writes the JSON file (overwriting it); returns false when it cannot be opened.
  bool write() const {
    if (!enabled()) return true;
    std::lock_guard lk(m_);
    std::FILE* f = std::fopen(path_.c_str(), "w");
    if (!f) return false;
    const std::size_t pid = rank_;
    std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%zu,\"dropped\":%zu},",
                 rank_, dropped_);
    std::fprintf(f, "\"traceEvents\":[\n");
    std::fprintf(f,
                 "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":0,\"args\":{\"name\":"
                 "\"gradsync rank %zu\"}},\n",
                 pid, rank_);
    std::fprintf(f,
                 "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":1,\"args\":{\"name\":"
                 "\"caller\"}},\n",
                 pid);
    std::fprintf(f,
                 "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":2,\"args\":{\"name\":"
                 "\"progress\"}}",
                 pid);
    if (std::any_of(events_.begin(), events_.end(),  // named only where used
                    [](const event& e) { return e.tr == track::codec_wire; })) {
      std::fprintf(f,
                   ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":3,\"args\":{"
                   "\"name\":\"codec wire\"}}",
                   pid);
    }
    for (const auto& e : events_) {
      std::fprintf(f,
                   ",\n{\"name\":\"%s\",\"cat\":\"gradsync\",\"ph\":\"%c\",\"pid\":%zu,\"tid\":%d,"
                   "\"ts\":%.3f",
                   escape(e.name).c_str(), e.ph, pid, static_cast<int>(e.tr),
                   static_cast<double>(e.ts_ns) / 1e3);
      if (e.ph == 'X') std::fprintf(f, ",\"dur\":%.3f", static_cast<double>(e.dur_ns) / 1e3);
      if (e.ph == 'i') std::fprintf(f, ",\"s\":\"t\"");
      std::fprintf(f, ",\"args\":{%s}}", e.args.c_str());
    }
    std::fprintf(f, "\n]}\n");
    return std::fclose(f) == 0;
  }

  /// Escapes a string for use inside a JSON string literal.
  static std::string escape(std::string_view s) {
    std::string o;
    o.reserve(s.size());
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        o += '\\';
        o += c;
      } else if (u < 0x20) {
        char b[8];
        std::snprintf(b, sizeof b, "\\u%04x", u);
        o += b;
      } else {
        o += c;
      }
    }
    return o;
  }

 private:
  struct event {
    std::string name;
    char ph;
    track tr;
    std::int64_t ts_ns, dur_ns;
    std::string args;
  };
  static std::int64_t ns(time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }

  std::string path_;
  std::size_t rank_ = 0;
  mutable std::mutex m_;
  std::vector<event> events_;
  std::size_t dropped_ = 0;
};

}  // namespace gradsync::observe
