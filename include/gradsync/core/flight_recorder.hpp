// SPDX-License-Identifier: Apache-2.0
// The flight recorder: the last N collectives of one rank (default 64) in a fixed ring —
// sequence number, what the call was, the phase it reached, when it started and ended —
// written out when a call fails with timeout, peer_lost, mismatch, diverged, non_finite or
// aborted, to `<path>.rank<R>.json` (GRADSYNC_FLIGHT_RECORDER=path) or stderr. Every
// rank writes its own; scripts/flight-report reads them all and names the first call
// where the ranks disagree, or the rank that never arrived. An allreducer keeps one
// (allreducer_options::flight_recorder); a free call records into
// call_options::recorder when given one. Recording copies a few words per call, under a
// mutex nobody else holds (one caller at a time; the dump may come from another thread).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gradsync/core/rank_file.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/core/stall.hpp"

namespace gradsync {

class flight_recorder {
  using clock = std::chrono::steady_clock;

 public:
  /// How far a recorded call got.
  enum class phase : std::uint8_t { entered, checked, done, failed };

  /// Writes `<path>.rank<rank>.json` on dump() (stderr when `path` is empty); keeps the
  /// last `depth` calls.
  explicit flight_recorder(const std::string& path = env_path(), std::size_t rank = 0,
                           std::size_t depth = 64)
      : path_(path.empty() ? std::string() : path_for(path, rank)),
        rank_(rank),
        ring_(std::max<std::size_t>(depth, 1)) {}

  /// GRADSYNC_FLIGHT_RECORDER, or "" when unset.
  static std::string env_path() { return detail::env_or_empty("GRADSYNC_FLIGHT_RECORDER"); }
  /// `path` with ".rank<R>.json" (replacing a ".json" ending).
  static std::string path_for(const std::string& path, std::size_t rank) {
    return detail::rank_json_path(path, rank);
  }
  const std::string& path() const { return path_; }

  /// Call `seq` starts now.
  void enter(std::uint64_t seq, const call_note& note) {
    std::lock_guard lk(m_);
    entry& e = ring_[next_++ % ring_.size()];
    e = entry{};
    e.seq = seq;
    e.note = note;
    copy(e.label, note.label);
    e.note.label = {};
    e.start = clock::now();
  }
  /// Call `seq` reached phase `p` (`code`: the error of a failed one).
  void mark(std::uint64_t seq, phase p, errc code = errc{}) {
    std::lock_guard lk(m_);
    for (std::size_t i = 0; i < std::min(next_, ring_.size()); ++i) {
      entry& e = ring_[(next_ - 1 - i) % ring_.size()];
      if (e.seq != seq) continue;
      e.reached = p;
      e.code = code;
      if (p == phase::done || p == phase::failed) e.end = clock::now();
      return;
    }
  }

  /// Writes the ring, oldest first, as JSON lines after a header naming this rank (`who`)
  /// and the error; returns false when the file cannot be written.
  bool dump(const std::string& who, const std::string& why) const {
    std::lock_guard lk(m_);
    FILE* f = path_.empty() ? stderr : std::fopen(path_.c_str(), "w");
    if (!f) return false;
    const auto now = clock::now();
    std::fprintf(f, "{\"flight_recorder\":1,\"rank\":%zu,\"who\":\"%s\",\"error\":\"%s\"}\n", rank_,
                 escape(who).c_str(), escape(why).c_str());
    const std::size_t n = std::min(next_, ring_.size());
    for (std::size_t i = 0; i < n; ++i) {
      const entry& e = ring_[(next_ - n + i) % ring_.size()];
      const double ago = std::chrono::duration<double>(now - e.start).count();
      const double took = e.end == clock::time_point{}
                              ? -1.0
                              : std::chrono::duration<double>(e.end - e.start).count();
      std::fprintf(
          f,
          "{\"seq\":%llu,\"kind\":\"%s\",\"algorithm\":\"%s\",\"type\":\"%s\",\"op\":\"%s\","
          "\"count\":%zu,\"label\":\"%s\",\"phase\":\"%s\",\"error\":\"%s\","
          "\"started_s_ago\":%.6f,\"seconds\":%.6f}\n",
          static_cast<unsigned long long>(e.seq), escape(e.note.kind).c_str(),
          escape(e.note.algorithm).c_str(), std::string(dtype_name(e.note.type)).c_str(),
          std::string(op_name(e.note.op)).c_str(), e.note.count, escape(e.label).c_str(),
          phase_name(e.reached), e.code == errc{} ? "" : std::string(errc_name(e.code)).c_str(),
          ago, took);
    }
    if (f != stderr) std::fclose(f);
    return true;
  }

  /// Whether `code` is worth a dump (a failure that involves other ranks or bad data).
  static bool dumps_on(errc code) {
    return code != errc::invalid_argument && code != errc::transport;
  }

 private:
  struct entry {
    std::uint64_t seq = 0;
    call_note note{};  // its views: static text only (the label is copied below)
    char label[96] = {};
    phase reached = phase::entered;
    errc code{};
    clock::time_point start{}, end{};
  };

  template <std::size_t N>
  static void copy(char (&to)[N], std::string_view from) {
    const std::size_t n = std::min(from.size(), N - 1);
    std::memcpy(to, from.data(), n);
    to[n] = '\0';
  }
  static const char* phase_name(phase p) {
    switch (p) {
      case phase::entered:
        return "entered";
      case phase::checked:
        return "checked";
      case phase::done:
        return "done";
      case phase::failed:
        return "failed";
    }
    return "?";
  }
  static std::string escape(std::string_view s) {
    std::string o;
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        o += '\\';
        o += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        o += ' ';
      } else {
        o += c;
      }
    }
    return o;
  }

  std::string path_;
  std::size_t rank_;
  mutable std::mutex m_;
  std::vector<entry> ring_;
  std::size_t next_ = 0;  // calls entered (the next slot is next_ % size)
};

namespace detail {
/// Runs `body` (a call numbered `seq`) and keeps opt.recorder's record of it: done, or
/// failed with the error's code and, for failures that involve other ranks, written out.
/// `who()`: how this rank names itself there (built only for a dump).
template <class Body, class Who>
void recorded(const call_options& opt, std::uint64_t seq, Body&& body, Who&& who) {
  if (!opt.recorder) return body();
  try {
    body();
    opt.recorder->mark(seq, flight_recorder::phase::done);
  } catch (const error& e) {
    opt.recorder->mark(seq, flight_recorder::phase::failed, e.code());
    if (flight_recorder::dumps_on(e.code())) (void)opt.recorder->dump(who(), e.what());
    throw;
  }
}

}  // namespace detail

}  // namespace gradsync
