// SPDX-License-Identifier: Apache-2.0
// The functions stall.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include "gradsync/core/stall.hpp"

namespace gradsync {

GRADSYNC_DECL void stall_watch::warn(std::size_t log_rank, const std::string& me,
                                     const std::vector<peer_position>& positions) const {
  std::string late;
  std::size_t n_late = 0;
  for (const peer_position& p : positions) {
    if (p.known && p.entered >= entered_) continue;
    if (n_late++ < 16) {
      late += (late.empty() ? "" : ", ") + p.name;
      if (!p.known) {
        late += " (not in a gradsync call: computing, or stuck outside gradsync)";
      } else if (p.entered == 0) {
        late += " (no call yet)";
      } else {
        late += " (still at op #" + std::to_string(p.entered - 1) + ")";
      }
    }
  }
  if (n_late > 16) late += ", and " + std::to_string(n_late - 16) + " more";
  std::string held;  // in the call, but waiting for a rank of their own node
  for (const peer_position& p : positions) {
    if (!p.known || p.entered < entered_ || p.blocked_on == 0) continue;
    held += (held.empty() ? "" : ", ") + p.name + " for rank " + std::to_string(p.blocked_on - 1);
  }
  if (!held.empty()) held = "; waiting inside their node: " + held;
  const double waited = std::chrono::duration<double>(clock::now() - start_).count();
  const std::string what = describe();
  if (n_late == 0) {
    log(log_level::warn, log_rank,
        "stall: %s has waited %.1f s in op #%llu (%s); every rank has entered it%s", me.c_str(),
        waited, static_cast<unsigned long long>(seq_), what.c_str(),
        held.empty() ? ", so one of them is slow inside it" : held.c_str());
  } else {
    log(log_level::warn, log_rank,
        "stall: %s has waited %.1f s in op #%llu (%s); not yet entered by %s%s", me.c_str(), waited,
        static_cast<unsigned long long>(seq_), what.c_str(), late.c_str(), held.c_str());
  }
}

GRADSYNC_DECL std::string stall_watch::describe() const {
  std::string s = std::string(note_.kind);
  if (!note_.algorithm.empty()) s += " " + std::string(note_.algorithm);
  s += " of " + std::to_string(note_.count) + " " + std::string(dtype_name(note_.type)) + " (" +
       std::to_string(note_.count * dtype_size(note_.type)) + " bytes), op " +
       std::string(op_name(note_.op));
  if (!note_.label.empty()) s += ", " + std::string(note_.label);
  return s;
}

}  // namespace gradsync
