// SPDX-License-Identifier: Apache-2.0
// Per-rank output files named from one path the user gives (the timeline, the flight
// recorder), and the environment variables that give it.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string>

namespace gradsync::detail {

/// `path` with ".rank<R>.json", replacing a ".json" ending: trace.json -> trace.rank3.json,
/// trace -> trace.rank3.json.
inline std::string rank_json_path(const std::string& path, std::size_t rank) {
  const std::string suffix = ".rank" + std::to_string(rank) + ".json";
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    return path.substr(0, path.size() - 5) + suffix;
  }
  return path + suffix;
}

/// Environment variable `name`, or "" when unset.
inline std::string env_or_empty(const char* name) {
  const char* s = std::getenv(name);
  return s ? std::string(s) : std::string();
}

}  // namespace gradsync::detail
