// SPDX-License-Identifier: Apache-2.0
// The frame of one collective over both levels of a transport::two_level, written once
// for the collectives built on the two levels (broadcast.hpp, reduce_scatter.hpp): the
// call is numbered on each level, both levels' stall watches and the flight recorder
// learn what it is, this rank answers the other level's queries while it waits on one,
// and a failure of one level is relayed to the other so that its peers stop waiting.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gradsync/core/call.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/flight_recorder.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/stall.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync::transport::detail {

/// Runs body(in_ctx, out_ctx) as one call of `t`: in_ctx numbers it on `in` (inside the
/// node: t.intra() or a wrapper that forwards to it), out_ctx on `out` (across the nodes:
/// t.inter() or a wrapper); both share opt's deadline. `note.kind` names the collective,
/// `inside` and `across` its two levels in stall warnings (string literals: the watches
/// keep them). A timeout whose cause the other level knows (a rank lost there) is
/// rethrown as peer_lost quoting it.
template <class Intra, class Inter, class In, class Out>
void two_level_call(
    two_level<Intra, Inter>& t, In& in, Out& out, const call_options& opt, call_note note,
    std::string_view inside, std::string_view across,
    gradsync::detail::function_ref<void(const call_context&, const call_context&)> body) {
  const deadline until = opt.make_deadline();
  const std::uint64_t in_seq = in.next_seq(), out_seq = out.next_seq();
  note.label = opt.label;
  const std::string_view kind = note.kind;
  note.kind = inside;
  gradsync::detail::enter_call(in, in_seq, note);
  note.kind = across;
  gradsync::detail::enter_call(out, out_seq, note);
  note.kind = kind;
  if (opt.recorder) opt.recorder->enter(in_seq, note);
  const typename two_level<Intra, Inter>::serving serving(t);
  try {
    gradsync::detail::recorded(
        opt, in_seq,
        [&] {
          body(call_context{until, in_seq, data_tag(in_seq)},
               call_context{until, out_seq, data_tag(out_seq)});
        },
        [&] { return t.describe_self(); });
  } catch (const error& e) {
    t.relay_failure(e);
    if (e.code() == errc::timeout) {
      const std::string notice = t.failure_notice();
      if (!notice.empty()) {
        throw error(errc::peer_lost, e.site(),
                    notice + " (this rank had timed out meanwhile: " + e.what() + ")");
      }
    }
    throw;
  }
}

}  // namespace gradsync::transport::detail
