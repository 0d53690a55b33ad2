// SPDX-License-Identifier: Apache-2.0
// Logging to stderr with a rank prefix, filtered by GRADSYNC_LOG=warn|info|debug.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace gradsync {

enum class log_level : int { off = 0, warn = 1, info = 2, debug = 3 };

/// The level a GRADSYNC_LOG value names (nullptr: unset, warn). An unknown value says so
/// on stderr and means warn.
inline log_level log_level_from(const char* s) {
  if (!s) return log_level::warn;
  if (!std::strcmp(s, "debug")) return log_level::debug;
  if (!std::strcmp(s, "info")) return log_level::info;
  if (!std::strcmp(s, "off") || !std::strcmp(s, "none")) return log_level::off;
  if (std::strcmp(s, "warn") != 0) {
    std::fprintf(stderr,
                 "[gradsync] warn: GRADSYNC_LOG='%s' is not one of off, warn, info, debug; "
                 "logging warnings only\n",
                 s);
  }
  return log_level::warn;
}

/// The level chosen by GRADSYNC_LOG (read once per process).
inline log_level current_log_level() {
  static const log_level level = log_level_from(std::getenv("GRADSYNC_LOG"));
  return level;
}

inline bool log_enabled(log_level l) {
  return static_cast<int>(l) <= static_cast<int>(current_log_level());
}

/// printf-style log line: "[gradsync rank R] level: message".
template <class... Args>
void log(log_level l, std::size_t rank, const char* fmt, Args... args) {
  if (!log_enabled(l)) return;
  static constexpr const char* names[] = {"", "warn", "info", "debug"};
  char buf[1024];
  if constexpr (sizeof...(Args) == 0) {
    std::snprintf(buf, sizeof buf, "%s", fmt);
  } else {
    std::snprintf(buf, sizeof buf, fmt, args...);
  }
  std::fprintf(stderr, "[gradsync rank %zu] %s: %s\n", rank, names[static_cast<int>(l)], buf);
}

}  // namespace gradsync
