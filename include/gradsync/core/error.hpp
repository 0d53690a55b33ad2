// SPDX-License-Identifier: Apache-2.0
// The one exception family gradsync throws. Every message names the rank, the peer
// (when there is one), the operation's sequence number and what went wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "gradsync/config.hpp"

namespace gradsync {

/// What kind of failure an error reports.
enum class errc : std::uint8_t {
  timeout = 1,       ///< a wait passed its deadline
  peer_lost,         ///< a peer died or aborted the job
  mismatch,          ///< ranks called with different count, type, op, algorithm or plan
  invalid_argument,  ///< the caller passed something unusable (sizes, aliasing, ranks)
  transport,         ///< the underlying library (MPI, NCCL, CUDA, OS) reported a failure
  diverged,          ///< ranks ended a verified call with different results (call_options::verify)
  non_finite,        ///< a rank's input held NaN or Inf (call_options::check_finite)
  aborted,           ///< the transport was aborted (abort()) while or before this rank waited
};

/// How many error codes there are, plus one (tables indexed by errc; slot 0: other errors).
inline constexpr std::size_t errc_slots = 9;

/// "timeout", "peer_lost", "mismatch", "invalid_argument", "transport", "diverged",
/// "non_finite" or "aborted".
inline constexpr std::string_view errc_name(errc c) {
  switch (c) {
    // clang-format off
    case errc::timeout: return "timeout";
    case errc::peer_lost: return "peer_lost";
    case errc::mismatch: return "mismatch";
    case errc::invalid_argument: return "invalid_argument";
    case errc::transport: return "transport";
    case errc::diverged: return "diverged";
    case errc::non_finite: return "non_finite";
    case errc::aborted: return "aborted";
      // clang-format on
  }
  return "unknown";
}

/// Where an error happened; absent fields are left at npos (or empty).
struct error_site {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);  ///< "not known"
  error_site() = default;
  /// Rank `r`, with the peer `p` and the call's sequence number `s` when known.
  error_site(std::size_t r, std::size_t p = npos, std::uint64_t s = ~std::uint64_t{0})
      : rank(r), peer(p), seq(s) {}

  std::size_t rank = npos;  ///< the rank in the whole job when known, else in the group
  std::size_t peer = npos;  ///< likewise for the peer
  std::uint64_t seq = ~std::uint64_t{0};  ///< the call's sequence number on the transport
  std::string host;                       ///< this rank's host, when known
  std::string peer_host;                  ///< the peer's host, when known
  /// Sub-group transports (a split, two_level's levels): rank and peer in the group,
  /// and its size, when rank/peer above are the job's ranks. npos: not a sub-group.
  std::size_t group_rank = npos;  ///< rank in the sub-group
  std::size_t group_peer = npos;  ///< peer in the sub-group
  std::size_t group_size = npos;  ///< the sub-group's size
};

/// The gradsync exception; `code()` tells the kind, `what()` the whole story.
class error : public std::runtime_error {
 public:
  /// An error of kind `code` at `site`; what() is the code, the site and `detail`.
  error(errc code, const error_site& site, const std::string& detail)
      : std::runtime_error(format(code, site, detail)), code_(code), site_(site) {}

  /// What kind of failure (timeout, peer_lost, mismatch, ...).
  errc code() const noexcept { return code_; }
  /// Where: rank, peer, sequence number, hosts.
  const error_site& site() const noexcept { return site_; }

 private:
  GRADSYNC_DECL static std::string format(errc code, const error_site& s,
                                          const std::string& detail);

  errc code_;
  error_site site_;
};

}  // namespace gradsync

#if GRADSYNC_HEADER_ONLY
#include "gradsync/core/error.ipp"
#endif
