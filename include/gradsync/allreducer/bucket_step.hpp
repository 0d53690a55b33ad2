// SPDX-License-Identifier: Apache-2.0
// What the allreducer's shared part (allreducer_core) asks of the policy-typed part that
// runs a bucket's collective (bucket_runner<Transport, Algorithm, Compression>): a table
// of steps by element type, plain function pointers, and a few virtual calls. So the
// code that orders buckets, packs them and keeps statistics is compiled once per
// program instead of once per composition of policies. And what the two parts share
// (allreducer_shared), made before either: the allreducer builds the shared state, then
// the runner, then the core, which it hands the runner.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gradsync/allreducer/staging_pool.hpp"
#include "gradsync/allreducer_options.hpp"
#include "gradsync/check/finite.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/flight_recorder.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"

namespace gradsync::detail {

/// What both parts of an allreducer use: the options of every collective (recorded by
/// the allreducer's flight recorder unless they name their own), its timeline and its
/// pool of staging arenas over the transport.
struct allreducer_shared {
  /// Over transport `t` (borrowed; it must outlive the allreducer).
  template <class Tr>
  allreducer_shared(Tr& t, const allreducer_options& o)
      : recorder(std::make_unique<flight_recorder>(o.flight_recorder, t.rank(), o.flight_depth)),
        options(recorded(o.call, recorder.get())),
        timeline(o.timeline, t.rank()),
        pool(&t, staging_pool::placer<Tr>()) {}
  allreducer_shared(const allreducer_shared&) = delete;
  allreducer_shared& operator=(const allreducer_shared&) = delete;

  std::unique_ptr<flight_recorder> recorder;  // the last calls, written when one fails
  call_options options;
  observe::timeline timeline;
  staging_pool pool;

 private:
  static call_options recorded(call_options o, flight_recorder* r) {
    if (!o.recorder) o.recorder = r;
    return o;
  }
};

class bucket_runner_base {
 public:
  /// Reduces `count` elements at `data` of the slot's element type; `ops`: the slot's
  /// erased element type and op (step_entry), `state`: the codec's home for this bucket
  /// (null: fresh state), `parts`: the bucket's tensors.
  using step = void (*)(bucket_runner_base& self, const void* ops, void* data, std::size_t count,
                        std::shared_ptr<void>* state, std::span<const compress::tensor_part> parts,
                        observe::track tr, observe::call_stats& acc);
  /// One element type's step: a function typed for it, or, where the algorithm runs on
  /// bytes and no codec takes the type, the runner's one byte-level step with the type
  /// and op erased into `ops` (a constant of the runner's own type; null for typed steps).
  struct step_entry {
    step fn = nullptr;
    const void* ops = nullptr;
    explicit operator bool() const { return fn != nullptr; }
  };
  using step_table = std::array<step_entry, 8>;  // indexed by dtype; empty: not built

  bucket_runner_base(const bucket_runner_base&) = delete;
  bucket_runner_base& operator=(const bucket_runner_base&) = delete;

  /// Runs `table`'s step for `type`.
  void run(const step_table& table, dtype type, void* data, std::size_t count,
           std::shared_ptr<void>* state, std::span<const compress::tensor_part> parts,
           observe::track tr, observe::call_stats& acc) {
    const step_entry& e = table[static_cast<std::size_t>(type)];
    e.fn(*this, e.ops, data, count, state, parts, tr, acc);
  }

  /// Names the bucket the next run() is for, in stall warnings and the flight recorder
  /// (the text must outlive the run).
  void set_label(std::string_view label) { opt_.label = label; }
  /// Whether the next run()s agree their call headers (when call_options::check is on):
  /// grouped calls do; a step's buckets do not, agree_step covered them.
  void set_header_check(bool on) { opt_.check = on && header_check_; }
  /// Whether the composition has a codec, which reads a bucket's tensors (run()'s `parts`);
  /// grouped calls list them only then.
  bool reads_tensors() const { return reads_tensors_; }

  /// A timeline event whose arguments (a JSON object body from `args()`) are only built
  /// when the timeline is on.
  template <class Args>
  void event(std::string_view name, observe::track tr, std::chrono::steady_clock::time_point begin,
             std::chrono::steady_clock::time_point end, Args&& args) {
    tl_.complete_with(name, tr, begin, end, args);
  }

  /// Shares this rank's finding with every rank (check/finite.hpp); errc::non_finite on
  /// every rank when any found a NaN or Inf. `name(i)` names tensor i of `tensors` (a
  /// peer's finding naming another is errc::mismatch).
  virtual void share_finding(const finite_finding& mine, std::size_t tensors,
                             function_ref<std::string(std::size_t)> name) = 0;
  /// Agrees the start of step `step` of the committed plan (`plan`: plan_name of its
  /// digest, text that outlives the allreducer's calls; op `op`; check_finite `finite`)
  /// with every rank, once per step: with the plan agreed at commit() and the buckets
  /// launched in plan order, it covers every bucket's header.
  virtual void agree_step(std::uint64_t step, std::string_view plan, reduce_op op, bool finite) = 0;
  /// How this rank names itself in those findings.
  virtual std::string describe_self() const = 0;
  /// "direct_one_shot x1, direct_two_shot x4" when the algorithm chooses per bucket (as
  /// algo::auto_select), else empty.
  virtual std::string choices(const fusion::plan& p) const = 0;

  /// Why a table built for op `op` has no step for `d` (`listed`: whether the element
  /// types it was built for hold d): " and ..." text that follows "tensor #i is <type>".
  static std::string refusal(dtype d, reduce_op op, bool listed) {
    if (d == dtype::i8) return int8_refusal();
    if (!listed) {
      return " and commit() was given element_types without it (add " + std::string(dtype_name(d)) +
             "'s type to the list, or call commit(op))";
    }
    return " and op::" + std::string(op_name(op)) + " needs a floating-point type";
  }
  static std::string int8_refusal() {
    return ": the allreducer does not reduce int8 tensors (int8_t is compress::int8's wire "
           "type; the free gradsync::allreduce takes them)";
  }

 protected:
  /// The collectives run with `opt`, but for check_finite: the allreducer checks a
  /// bucket's tensors itself (in its pack pass) and calls share_finding.
  bucket_runner_base(const call_options& opt, observe::timeline& tl, bool reads_tensors)
      : opt_(without_finite(opt)),
        tl_(tl),
        header_check_(opt.check),
        reads_tensors_(reads_tensors) {}
  ~bucket_runner_base() = default;

  /// "direct_one_shot x1, direct_two_shot x4": how many buckets of `p` get each name
  /// `choice(bytes)` gives, in the order they first appear.
  static std::string count_choices(const fusion::plan& p,
                                   function_ref<std::string_view(std::size_t)> choice) {
    std::vector<std::pair<std::string_view, std::size_t>> counts;
    for (const auto& k : p.buckets) {
      const std::string_view c = choice(k.bytes());
      auto it = std::find_if(counts.begin(), counts.end(), [&](auto& e) { return e.first == c; });
      if (it == counts.end()) {
        counts.emplace_back(c, 1);
      } else {
        ++it->second;
      }
    }
    std::string out;
    for (const auto& [name, count] : counts) {
      if (!out.empty()) out += ", ";
      out += std::string(name) + " x" + std::to_string(count);
    }
    return out;
  }

  call_options opt_;  // label: the bucket being run (set_label); check: set_header_check
  observe::timeline& tl_;
  const bool header_check_;  // the user's call_options::check
  const bool reads_tensors_;

 private:
  static call_options without_finite(call_options o) {
    o.check_finite = false;
    return o;
  }
};

}  // namespace gradsync::detail
