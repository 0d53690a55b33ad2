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
// The file is written beside its name and renamed over it, so a crash during the dump
// leaves the previous record whole; a second recorder of the same path and rank in one
// process (two allreducers) writes `<path>.2.rank<R>.json`, a third `.3.`, and so on.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
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

  /// Writes `<path>.rank<rank>.json` on dump() (stderr when `path` is empty), or
  /// `<path>.N.rank<rank>.json` when N-1 live recorders of this process have that name
  /// already; keeps the last `depth` calls.
  explicit flight_recorder(const std::string& path = env_path(), std::size_t rank = 0,
                           std::size_t depth = 64)
      : path_(path.empty() ? std::string() : claim(path, rank)),
        rank_(rank),
        ring_(std::max<std::size_t>(depth, 1)) {}
  ~flight_recorder() {
    if (path_.empty()) return;
    auto& c = claimed();
    std::lock_guard lk(c.m);
    c.paths.erase(path_);
  }
  flight_recorder(const flight_recorder&) = delete;
  flight_recorder& operator=(const flight_recorder&) = delete;

  /// GRADSYNC_FLIGHT_RECORDER, or "" when unset.
  static std::string env_path() { return detail::env_or_empty("GRADSYNC_FLIGHT_RECORDER"); }
  /// `path` with ".rank<R>.json" (replacing a ".json" ending).
  static std::string path_for(const std::string& path, std::size_t rank) {
    return detail::rank_json_path(path, rank);
  }
  /// The file dump() writes ("" for stderr).
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
  /// and the error, through a temporary renamed over the file; returns false when the
  /// file cannot be written (the previous one, if any, is left as it was).
  bool dump(const std::string& who, const std::string& why) const {
    std::lock_guard lk(m_);
    if (path_.empty()) {
      write(stderr, who, why);
      return true;
    }
    const std::string tmp = path_ + "." + std::to_string(::getpid()) + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) return false;
    write(f, who, why);
    const bool written = !std::ferror(f);
    const bool closed = std::fclose(f) == 0;  // closed in any case
    const bool ok = written && closed && std::rename(tmp.c_str(), path_.c_str()) == 0;
    if (!ok) std::remove(tmp.c_str());
    return ok;
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

  // The record itself (m_ held).
  void write(FILE* f, const std::string& who, const std::string& why) const {
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
  }

  // Paths held by live recorders of this process: two allreducers given one path must
  // not overwrite each other's record of the failure.
  struct claimed_paths {
    std::mutex m;
    std::set<std::string> paths;
  };
  static claimed_paths& claimed() {
    static claimed_paths c;
    return c;
  }
  static std::string claim(const std::string& path, std::size_t rank) {
    const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
    const std::string stem = json ? path.substr(0, path.size() - 5) : path;
    auto& c = claimed();
    std::lock_guard lk(c.m);
    for (std::size_t n = 1;; ++n) {
      std::string p = path_for(n == 1 ? stem : stem + "." + std::to_string(n), rank);
      if (c.paths.insert(p).second) return p;
    }
  }

  // Cut at N-1 bytes, but not inside a UTF-8 character: the cut one is left out whole.
  template <std::size_t N>
  static void copy(char (&to)[N], std::string_view from) {
    std::size_t n = std::min(from.size(), N - 1);
    if (n < from.size()) {
      while (n > 0 && (static_cast<unsigned char>(from[n]) & 0xC0) == 0x80) --n;
    }
    std::memcpy(to, from.data(), n);
    to[n] = '\0';
  }
  // Bytes in the UTF-8 character at s[i], or 0 when they are not one (a lone or cut
  // lead byte, a stray continuation byte, an overlong form, a surrogate, past U+10FFFF).
  static std::size_t utf8_char(std::string_view s, std::size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return 1;
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      lo = c == 0xE0 ? 0xA0 : 0x80;
      hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      lo = c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
      return 0;
    }
    if (s.size() - i < n) return 0;
    for (std::size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) return 0;
    }
    return n;
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
  // JSON string contents, valid UTF-8 whatever came in (a byte that is not part of a
  // character becomes U+FFFD), so the report can read every file.
  static std::string escape(std::string_view s) {
    std::string o;
    for (std::size_t i = 0; i < s.size();) {
      const char c = s[i];
      const std::size_t n = utf8_char(s, i);
      if (n == 0) {
        o += "\\ufffd";
        ++i;
        continue;
      }
      if (c == '"' || c == '\\') {
        o += '\\';
        o += c;
      } else if (n == 1 && static_cast<unsigned char>(c) < 0x20) {
        o += ' ';
      } else {
        o.append(s.substr(i, n));
      }
      i += n;
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
