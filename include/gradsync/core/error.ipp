// SPDX-License-Identifier: Apache-2.0
// The functions error.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include "gradsync/core/error.hpp"

namespace gradsync {

GRADSYNC_DECL std::string error::format(errc code, const error_site& s, const std::string& detail) {
  std::string m = "gradsync ";
  m += errc_name(code);
  if (s.rank != error_site::npos) m += " on rank " + std::to_string(s.rank);
  if (s.peer != error_site::npos) m += " (peer " + std::to_string(s.peer) + ")";
  if (s.seq != ~std::uint64_t{0}) m += " in op #" + std::to_string(s.seq);
  std::string extra;  // [hosts; sub-group ranks]
  if (!s.host.empty() || !s.peer_host.empty()) {
    extra = "rank " + std::to_string(s.rank) + " on " + (s.host.empty() ? "?" : s.host);
    if (s.peer != error_site::npos) {
      extra +=
          ", peer " + std::to_string(s.peer) + " on " + (s.peer_host.empty() ? "?" : s.peer_host);
    }
  }
  if (s.group_size != error_site::npos) {
    extra += (extra.empty() ? "" : "; ") + std::string("in a sub-group of ") +
             std::to_string(s.group_size) + " as rank " + std::to_string(s.group_rank);
    if (s.group_peer != error_site::npos) extra += ", peer " + std::to_string(s.group_peer);
  }
  if (!extra.empty()) m += " [" + extra + "]";
  m += ": ";
  m += detail;
  return m;
}

}  // namespace gradsync
