// SPDX-License-Identifier: Apache-2.0
// A tiny JSON validator (RFC 8259 grammar, no semantics) and helpers that read a
// Chrome-trace file as gradsync writes it (one event per line), for the timeline tests.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gradsync::testbed {

class json_checker {
 public:
  explicit json_checker(const std::string& s) : s_(s) {}
  /// True when the whole text is one valid JSON value.
  bool valid() {
    i_ = 0;
    ws();
    if (!value(0)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  bool value(int depth) {
    if (depth > 64 || i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return string();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return number();
    return literal("true") || literal("false") || literal("null");
  }
  bool object(int depth) {
    ++i_;
    ws();
    if (peek('}')) return ++i_, true;
    for (;;) {
      ws();
      if (!string()) return false;
      ws();
      if (!peek(':')) return false;
      ++i_;
      ws();
      if (!value(depth + 1)) return false;
      ws();
      if (peek('}')) return ++i_, true;
      if (!peek(',')) return false;
      ++i_;
    }
  }
  bool array(int depth) {
    ++i_;
    ws();
    if (peek(']')) return ++i_, true;
    for (;;) {
      ws();
      if (!value(depth + 1)) return false;
      ws();
      if (peek(']')) return ++i_, true;
      if (!peek(',')) return false;
      ++i_;
    }
  }
  bool string() {
    if (!peek('"')) return false;
    for (++i_; i_ < s_.size(); ++i_) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') return ++i_, true;
      if (c < 0x20) return false;
      if (c == '\\') {
        if (++i_ >= s_.size()) return false;
        const char e = s_[i_];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k) {
            if (++i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_])))
              return false;
          }
        } else if (std::string("\"\\/bfnrt").find(e) == std::string::npos) {
          return false;
        }
      }
    }
    return false;
  }
  bool number() {
    const std::size_t start = i_;
    if (peek('-')) ++i_;
    if (peek('0')) {
      ++i_;
    } else if (!digits()) {
      return false;
    }
    if (peek('.')) {
      ++i_;
      if (!digits()) return false;
    }
    if (peek('e') || peek('E')) {
      ++i_;
      if (peek('+') || peek('-')) ++i_;
      if (!digits()) return false;
    }
    return i_ > start;
  }
  bool digits() {
    const std::size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    return i_ > start;
  }
  bool literal(const char* w) {
    const std::string lit(w);
    if (s_.compare(i_, lit.size(), lit) != 0) return false;
    i_ += lit.size();
    return true;
  }
  bool peek(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void ws() {
    while (i_ < s_.size() && std::string(" \t\r\n").find(s_[i_]) != std::string::npos) ++i_;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The set of "name":"..." values in a trace (event names and metadata names).
inline std::set<std::string> event_names(const std::string& text) {
  std::set<std::string> names;
  const std::string key = "\"name\":\"";
  for (std::size_t p = text.find(key); p != std::string::npos; p = text.find(key, p + 1)) {
    const std::size_t b = p + key.size(), e = text.find('"', b);
    if (e != std::string::npos) names.insert(text.substr(b, e - b));
  }
  return names;
}

/// A complete event ("ph":"X"): its name, track (tid) and span in microseconds.
struct span_event {
  std::string name;
  int tid = 0;
  double ts = 0, dur = 0;
};

/// The complete events of a trace written by observe::timeline (one event per line).
inline std::vector<span_event> complete_events(const std::string& text) {
  std::vector<span_event> out;
  std::istringstream in(text);
  auto field = [](const std::string& line, const std::string& key) -> std::string {
    const std::size_t p = line.find("\"" + key + "\":");
    if (p == std::string::npos) return {};
    const std::size_t b = p + key.size() + 3;
    return line.substr(b, line.find_first_of(",}", b) - b);
  };
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"ph\":\"X\"") == std::string::npos) continue;
    span_event e;
    const std::string name = field(line, "name");
    e.name = name.size() >= 2 ? name.substr(1, name.size() - 2) : name;
    e.tid = std::atoi(field(line, "tid").c_str());
    e.ts = std::strtod(field(line, "ts").c_str(), nullptr);
    e.dur = std::strtod(field(line, "dur").c_str(), nullptr);
    out.push_back(e);
  }
  return out;
}

/// "" when on every track each two events are disjoint or one holds the other (what a
/// trace viewer draws as nested slices); else the first two that partly overlap.
inline std::string partial_overlap(std::vector<span_event> ev) {
  std::sort(ev.begin(), ev.end(), [](const span_event& a, const span_event& b) {
    return a.tid != b.tid ? a.tid < b.tid : a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;
  });
  constexpr double slack = 0.002;  // us: ts and dur are printed to the nanosecond
  std::vector<const span_event*> open;
  for (const span_event& e : ev) {
    while (!open.empty() &&
           (open.back()->tid != e.tid || open.back()->ts + open.back()->dur <= e.ts + slack)) {
      open.pop_back();
    }
    if (!open.empty() && e.ts + e.dur > open.back()->ts + open.back()->dur + slack) {
      return "'" + e.name + "' at " + std::to_string(e.ts) + " us on track " +
             std::to_string(e.tid) + " starts inside '" + open.back()->name + "' and ends after it";
    }
    open.push_back(&e);
  }
  return {};
}

}  // namespace gradsync::testbed
