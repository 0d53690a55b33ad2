// SPDX-License-Identifier: Apache-2.0
// The frame of one collective call, written once for every entry point (the free
// collectives, algo::hierarchical, the direct algorithms' own header rounds and the
// allreducer's buckets and steps): it numbers the call, fixes its deadline, tells the
// stall watch and the flight recorder what the call is, builds and agrees its header,
// shares the finite check, verifies the result and records a failure (over two levels it
// also relays it to the other level). A new per-call check belongs here.
//   call_frame<Tr>        one flat transport;
//   level_frame<...>      both levels of a transport::two_level;
//   frame_for<Tr>         whichever of the two Tr takes, with one way to open it, agree and
//                         share a finding, for callers that do not care which.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gradsync/check/consistency.hpp"
#include "gradsync/check/finite.hpp"
#include "gradsync/check/two_levels.hpp"
#include "gradsync/check/verify.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/flight_recorder.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/stall.hpp"
#include "gradsync/kernels/finite.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync::detail {

/// The one place a call header is built: what `note` says the call is, its algorithm
/// field `algo` (a two-level call states each level's, or a poisoned node's), `flags`
/// (call_header::finite_checked) and broadcast's `root`.
inline call_header header_of(std::uint64_t seq, const call_note& note, std::string_view algo,
                             std::uint16_t flags = 0, std::size_t root = 0) {
  return call_header::make(seq, note.count, note.type, note.op, algo, flags, root);
}

/// The algorithm field of an allreducer step's header (call_header::step_of_plan):
/// "plan " and the first 12 hex digits of the committed plan's digest.
inline std::string plan_name(std::uint64_t digest) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string s = "plan ";
  for (int i = 15; i >= 4; --i) s += hex[(digest >> (4 * i)) & 0xf];
  return s;
}

/// How a one-buffer call names its buffer in a non-finite finding.
struct its_input_t {
  std::string operator()(std::size_t) const { return "its input"; }
};
inline constexpr its_input_t its_input{};

/// Tag of a call on device memory: call_options::verify hashes results in host memory,
/// so such a frame refuses it rather than skipping it silently.
struct on_device_t {};
inline constexpr on_device_t on_device{};

/// How a call names its levels in stall warnings (string literals: the watches keep
/// them); a call over one transport has one level and uses neither.
struct level_names {
  std::string_view inside, across;
};

/// The frame of one call over the flat transport Tr.
template <class Tr>  ///< the transport the call runs on (or a wrapper that forwards to it)
class call_frame {
 public:
  /// Opens the call: numbers it (the same on every rank), tells the stall watch and the
  /// flight recorder what it is (`note`) and fixes its deadline.
  call_frame(Tr& t, const call_options& opt, call_note note) : t_(t), opt_(opt), note_(note) {
    const std::uint64_t seq = t.next_seq();
    note_.label = opt.label;
    enter_call(t, seq, note_);
    if (opt.recorder) opt.recorder->enter(seq, note_);
    ctx_ = {opt.make_deadline(), seq, data_tag(seq)};
  }
  /// The same, opened as frame_for opens a frame (one level: `names` unused).
  call_frame(Tr& t, const call_options& opt, call_note note, level_names)
      : call_frame(t, opt, note) {}
  /// The same for a call on device memory (no verify).
  call_frame(Tr& t, const call_options& opt, call_note note, on_device_t)
      : call_frame((refuse_verify(t, opt), t), opt, note) {}
  call_frame(const call_frame&) = delete;
  call_frame& operator=(const call_frame&) = delete;

  /// What the algorithm's run() receives; check_finite may be set by the entry point.
  call_context& context() { return ctx_; }
  const call_context& context() const { return ctx_; }
  const call_options& options() const { return opt_; }

  /// This call's header (the direct algorithms publish it in their own first round).
  call_header header(std::uint16_t flags = 0, std::size_t root = 0) const {
    return header_of(ctx_.seq, note_, note_.algorithm, flags, root);
  }
  /// Agrees `h` with every rank when call_options::check asks for it: errc::mismatch
  /// on every rank, naming the ranks and the first field that differs.
  void agree(const call_header& h) const {
    agree_if_checked(t_, opt_, h, ctx_.until, same_rank{}, note_.kind);
  }
  /// agree() of this call's header with algorithm field `algo` (as level_frame::agree).
  void agree(std::string_view algo, std::uint16_t flags = 0, std::size_t root = 0) const {
    agree(header_of(ctx_.seq, note_, algo, flags, root));
  }
  /// The finite check of one input buffer: this rank's first NaN or Inf, shared.
  template <class T>
  void check_finite(const T* x, std::size_t count) const {
    share_finding(t_, find_non_finite(t_, t_.rank(), x, count), ctx_.until, its_input);
  }
  /// Shares this rank's finding over t: errc::non_finite on every rank when any has a NaN
  /// or Inf (check/finite.hpp); `left` says what the call left behind, `tensors` how many
  /// tensors `name` can name.
  static void share_finding(Tr& t, const finite_finding& mine, deadline until,
                            function_ref<std::string(std::size_t)> name,
                            std::string_view left = nothing_reduced, std::size_t tensors = 1) {
    gradsync::agree_finite(t, mine, until, name, left, tensors);
  }
  /// The checks before data moves are done (the flight recorder's "checked").
  void mark_checked() const {
    if (opt_.recorder) opt_.recorder->mark(ctx_.seq, flight_recorder::phase::checked);
  }
  /// call_options::verify: the ranks compare hashes of their `bytes` result bytes.
  void verify(const void* data, std::size_t bytes) const {
    if (opt_.verify) verify_result(t_, ctx_.seq, data, bytes, ctx_.until, same_rank{}, note_.kind);
  }
  /// Runs the call's body; a failure is recorded (and the record written) before it
  /// reaches the caller.
  template <class Body>
  void run(Body&& body) const {
    recorded(opt_, ctx_.seq, body, [&] { return describe_rank(t_, t_.rank()); });
  }

 private:
  static int refuse_verify(Tr& t, const call_options& opt) {
    if (opt.verify) {
      throw error(errc::invalid_argument, {t.rank(), error_site::npos, ~std::uint64_t{0}},
                  "call_options::verify (GRADSYNC_VERIFY=1) hashes results in host memory and "
                  "this transport's buffers are device memory; unset it for device calls");
    }
    return 0;
  }

  Tr& t_;
  const call_options& opt_;
  call_note note_;
  call_context ctx_{};
};

/// The frame of one call over both levels of a transport::two_level: numbered on each
/// level, both levels' stall watches told, this rank answering the other level's queries
/// while it waits on one, and a failure of one level relayed to the other so that its
/// peers stop waiting.
template <class Intra,  ///< the two_level's node transport
          class Inter,  ///< its cross-node transport
          class In,     ///< what moves the node level's messages (Intra or a wrapper)
          class Out>    ///< what moves the cross-node messages (Inter or a wrapper)
class level_frame {
 public:
  using levels = transport::two_level<Intra, Inter>;

  /// Opens the call on both levels; `inside` and `across` name its two levels in stall
  /// warnings (string literals: the watches keep them).
  level_frame(levels& t, In& in, Out& out, const call_options& opt, call_note note,
              std::string_view inside, std::string_view across)
      : t_(t), in_(in), out_(out), opt_(opt), note_(note) {
    const deadline until = opt.make_deadline();
    const std::uint64_t in_seq = in.next_seq(), out_seq = out.next_seq();
    note_.label = opt.label;
    call_note level = note_;
    level.kind = inside;
    enter_call(in, in_seq, level);
    level.kind = across;
    enter_call(out, out_seq, level);
    if (opt.recorder) opt.recorder->enter(in_seq, note_);
    in_c_ = {until, in_seq, data_tag(in_seq)};
    out_c_ = {until, out_seq, data_tag(out_seq)};
  }
  /// Opens the call on t's own levels (frame_for's way).
  level_frame(levels& t, const call_options& opt, call_note note,
              level_names names) requires(std::is_same_v<In, Intra>&& std::is_same_v<Out, Inter>)
      : level_frame(t, t.intra(), t.inter(), opt, note, names.inside, names.across) {}
  level_frame(const level_frame&) = delete;
  level_frame& operator=(const level_frame&) = delete;

  /// The call's context inside the node and across the nodes (one deadline).
  const call_context& inside() const { return in_c_; }
  const call_context& across() const { return out_c_; }
  const call_options& options() const { return opt_; }

  /// The node level's header with algorithm field `algo` (a direct node level publishes
  /// it in its own first round).
  call_header header(std::string_view algo, std::uint16_t flags = 0, std::size_t root = 0) const {
    return header_of(in_c_.seq, note_, algo, flags, root);
  }
  /// Agrees the call inside the node, then across the nodes, with algorithm field `algo`
  /// (check/two_levels.hpp), when call_options::check asks for it.
  void agree(std::string_view algo, std::uint16_t flags = 0, std::size_t root = 0) const {
    if (!opt_.check) return;
    agree_two_levels(
        t_, in_, out_, in_c_.seq, out_c_.seq, in_c_.until, algo,
        [&](std::uint64_t seq, std::string_view name) {
          return header_of(seq, note_, name, flags, root);
        },
        note_.kind);
  }
  /// The finite check of one input buffer over both levels.
  template <class T>
  void check_finite(const T* x, std::size_t count) const {
    const std::size_t bad = kernels::first_non_finite(x, count);
    share_finding(t_, in_, out_,
                  make_finding(0, bad, bad < count ? x + bad : static_cast<const T*>(nullptr),
                               t_.rank(), t_.describe_self()),
                  in_c_.until, its_input);
  }
  /// Shares this rank's finding inside the node, then across the nodes.
  static void share_finding(levels& t, In& in, Out& out, const finite_finding& mine, deadline until,
                            function_ref<std::string(std::size_t)> name, std::size_t tensors = 1) {
    gradsync::agree_finite(t, in, out, mine, until, name, tensors);
  }
  /// The same over t's own levels, with call_frame::share_finding's arguments.
  static void share_finding(
      levels& t, const finite_finding& mine, deadline until,
      function_ref<std::string(std::size_t)> name, std::string_view left = nothing_reduced,
      std::size_t tensors = 1) requires(std::is_same_v<In, Intra>&& std::is_same_v<Out, Inter>) {
    gradsync::agree_finite(t, t.intra(), t.inter(), mine, until, name, tensors, left);
  }
  void mark_checked() const {
    if (opt_.recorder) opt_.recorder->mark(in_c_.seq, flight_recorder::phase::checked);
  }
  /// call_options::verify over both levels (check/two_levels.hpp).
  void verify(const void* data, std::size_t bytes) const {
    if (opt_.verify) {
      verify_two_levels(t_, in_, out_, in_c_.seq, out_c_.seq, data, bytes, in_c_.until, note_.kind);
    }
  }
  /// Runs the call's body: a failure is recorded and relayed to the other level; a
  /// timeout whose cause the other level knows (a rank lost there) becomes peer_lost,
  /// quoting it.
  template <class Body>
  void run(Body&& body) const {
    const typename levels::serving serving(t_);
    try {
      recorded(opt_, in_c_.seq, body, [&] { return t_.describe_self(); });
    } catch (const error& e) {
      t_.relay_failure(e);
      if (e.code() == errc::timeout) {
        const std::string notice = t_.failure_notice();
        if (!notice.empty()) {
          throw error(errc::peer_lost, e.site(),
                      notice + " (this rank had timed out meanwhile: " + e.what() + ")");
        }
      }
      throw;
    }
  }

 private:
  levels& t_;
  In& in_;
  Out& out_;
  const call_options& opt_;
  call_note note_;
  call_context in_c_{}, out_c_{};
};

/// level_frame over t's own levels.
template <class Intra, class Inter>
using own_level_frame = level_frame<Intra, Inter, Intra, Inter>;

/// Which frame a call over Tr opens (frame_for): call_frame, unless Tr has levels.
template <class Tr>  ///< a transport, a wrapper of one, or a transport::two_level
struct frame_choice {
  using type = call_frame<Tr>;
};
template <transport::leveled Tr>
struct frame_choice<Tr> {
  using type = own_level_frame<typename Tr::intra_type, typename Tr::inter_type>;
};
/// The frame of a call over Tr: call_frame for one transport, level_frame over a
/// two_level's own levels. Both open as frame_for<Tr>(t, opt, note, names) and have
/// agree(algo, flags), run(body) and the static share_finding(t, mine, until, name).
template <class Tr>
using frame_for = typename frame_choice<Tr>::type;

}  // namespace gradsync::detail
