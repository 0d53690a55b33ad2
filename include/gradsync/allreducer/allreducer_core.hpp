// SPDX-License-Identifier: Apache-2.0
// The part of an allreducer that does not depend on its policies: it orders the work of
// steps, grouped calls and single tensors into buckets, packs and unpacks them, checks
// them for NaN and Inf, runs the progress thread, and keeps statistics, the timeline and
// the flight recorder. The policy-typed parts (bucket_runner, the typed calls of
// allreducer.hpp) reach it through bucket_runner_base and step tables. Not a template,
// so a program with many compositions compiles this once (docs/design.md, "What is
// compiled per element type and op").
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gradsync/allreducer/batch.hpp"
#include "gradsync/allreducer/bucket_step.hpp"
#include "gradsync/allreducer/call_ledger.hpp"
#include "gradsync/allreducer/staging_pool.hpp"
#include "gradsync/allreducer/step_gate.hpp"
#include "gradsync/allreducer/tensor_registry.hpp"
#include "gradsync/allreducer_options.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/check/finite.hpp"
#include "gradsync/config.hpp"
#include "gradsync/core/async.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/flight_recorder.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/fusion/concept.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/fusion/tensor.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"

namespace gradsync::detail {

/// "bucket 3 of 12: #40 'fc1.weight', #41 'fc1.bias', ... (5 tensors)" per bucket of `p`
/// (`label(i)`: tensor i's " 'name'" or ""): how stall warnings and the flight recorder
/// name a registered bucket.
GRADSYNC_DECL std::vector<std::string> bucket_labels(const fusion::plan& p,
                                                     function_ref<std::string(std::size_t)> label);

/// The names of an allreducer's four policies, for its log line, statistics and metrics.
struct composition_names {
  std::string_view transport, algorithm, fusion, compression;
};

class allreducer_core {
  using steady = std::chrono::steady_clock;

 public:
  using step_table = bucket_runner_base::step_table;

  /// Over transport `t` (borrowed; it must outlive the core), with the allreducer's
  /// shared state and the runner of its buckets (both made first; they must outlive the
  /// core, whose destructor joins the progress thread that uses them).
  template <class Tr>
  allreducer_core(Tr& t, const allreducer_options& o, composition_names names,
                  fusion::policy_values fusion, allreducer_shared& shared,
                  bucket_runner_base& runner)
      : allreducer_core(t.rank(), t.size(), o, names, fusion, shared, runner) {}
  allreducer_core(const allreducer_core&) = delete;
  allreducer_core& operator=(const allreducer_core&) = delete;
  /// Joins the progress thread: work not yet started is failed (its handles report it),
  /// the running collective finishes or hits its deadline. Then writes the timeline and
  /// the metrics file.
  GRADSYNC_DECL ~allreducer_core();

  const call_options& options() const { return opt_; }
  const observe::timeline& timeline() const { return tl_; }
  tensor_registry& registry() { return reg_; }
  const tensor_registry& registry() const { return reg_; }
  error_site site() const { return {rank_, error_site::npos, ~std::uint64_t{0}}; }

  /// Runs a grouped call of `list` with the steps of `table`: inline (after queued work
  /// drains), or on the progress thread when `async`.
  [[nodiscard]] GRADSYNC_DECL pending run_list(std::span<const tensor_ref> list, bool async,
                                               const step_table& table);

  /// Computes the plan of the registered tensors and agrees it with every rank of `t`
  /// (collective), refusing a tensor whose type `table` (the steps of op `op`) has no
  /// step for; `listed(d)`: whether the element types the table was built for hold d.
  /// Every step of the plan then runs with `table`.
  template <class Tr>
  void commit(Tr& t, const step_table& table, reduce_op op, bool (*listed)(dtype)) {
    bg_.drain();
    reg_.commit(t, opt_.make_deadline(), op_name(op),
                [&](std::size_t i) { refuse_unlisted(i, table, op, listed); });
    committed(table, op);
  }

  // The step of registered tensors (allreducer.hpp documents each).
  GRADSYNC_DECL void ready(std::size_t i);
  GRADSYNC_DECL pending allreduce_async();
  GRADSYNC_DECL void wait();
  GRADSYNC_DECL void reset_compression_state();
  bool test() const { return !step_ || step_->done->done(); }

  // Observability (allreducer.hpp documents each).
  observe::call_stats last_stats() const { return ledger_.snapshot().first; }
  observe::cumulative_stats total_stats() const { return ledger_.snapshot().second; }
  GRADSYNC_DECL std::string summary() const;

 private:
  GRADSYNC_DECL allreducer_core(std::size_t rank, std::size_t size, const allreducer_options& o,
                                composition_names names, fusion::policy_values fusion,
                                allreducer_shared& shared, bucket_runner_base& runner);

  // commit()'s parts that do not depend on the transport: the refusal of tensor i when
  // `table` has no step for its type, and what a new plan resets.
  GRADSYNC_DECL void refuse_unlisted(std::size_t i, const step_table& table, reduce_op op,
                                     bool (*listed)(dtype)) const;
  GRADSYNC_DECL void committed(const step_table& table, reduce_op op);

  // ---- batches: made here, run bucket by bucket on whatever thread posts them ------------

  GRADSYNC_DECL std::shared_ptr<batch> make_list_batch(std::span<const tensor_ref> list,
                                                       const step_table& table);
  GRADSYNC_DECL std::shared_ptr<batch> make_step_batch();
  GRADSYNC_DECL void init_batch(batch& b, const std::string& chosen);
  GRADSYNC_DECL void post(const std::shared_ptr<batch>& b, std::size_t k, observe::track tr,
                          bool async);
  /// Pack, reduce and unpack bucket k of `b`; never throws (errors go to b.done).
  GRADSYNC_DECL void run_bucket(batch& b, std::size_t k, const job_times& jt, observe::track tr);
  GRADSYNC_DECL void bucket_body(batch& b, std::size_t k, observe::track tr);
  /// check_finite for bucket k: its pack pass (or a pass over the tensors in place)
  /// finds this rank's first NaN or Inf, and the ranks agree; errc::non_finite on every
  /// rank, naming the first rank's tensor, before the bucket is reduced.
  template <class Copy>
  void check_finite(batch& b, std::size_t k, Copy& copy);  // allreducer_core.ipp

  // ---- the step of registered tensors -----------------------------------------------------

  GRADSYNC_DECL void start_step_if_needed();
  GRADSYNC_DECL void launch_rest();
  GRADSYNC_DECL void launch_ready_buckets();

  std::size_t rank_, size_;
  composition_names names_;
  const call_options& opt_;  // the shared state's (allreducer_shared)
  observe::timeline& tl_;
  detail::call_ledger ledger_;
  tensor_registry reg_;
  staging_pool& pool_;
  bucket_runner_base* runner_;
  seconds_d stall_;  // a collective this long is a stall
  // The codec's state of each bucket of the plan (error-feedback residuals), made on
  // first use; only the job running bucket k touches slot k.
  std::vector<std::shared_ptr<void>> codec_state_;
  std::string plan_chosen_;                 // runner_->choices(plan), set by commit()
  std::vector<std::string> bucket_labels_;  // bucket_labels(plan), set by commit()
  std::string list_label_;                  // a grouped call's bucket, while it runs
  step_table step_steps_{};                 // the registered plan's steps
  reduce_op step_op_ = reduce_op::sum;      // and their op
  std::string plan_name_;                   // plan_name(digest): the steps' header
  std::uint64_t steps_ = 0;                 // steps started (the next step's number)
  progress_thread bg_;
  std::shared_ptr<batch> step_;  // the current step of registered tensors
  detail::step_gate gate_;
  enum class step_phase { idle, open, closed };  // closed: by allreduce_async, not waited
  step_phase phase_ = step_phase::idle;
};

}  // namespace gradsync::detail

#if GRADSYNC_HEADER_ONLY
#include "gradsync/allreducer/allreducer_core.ipp"
#endif
