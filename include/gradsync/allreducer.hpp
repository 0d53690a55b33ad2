// SPDX-License-Identifier: Apache-2.0
// The façade: allreducer<Transport, Algorithm, Fusion, Compression> composes the four
// policies into one object that keeps state across calls: the bucket plan of a model's
// registered gradients, the background progress thread, statistics and the timeline.
// Transport is one transport, or a transport::two_level with algo::hierarchical (buckets
// go through the node's transport and across nodes; everything else is the same).
//
// Threading. One caller thread uses an allreducer at a time. Asynchronous work (buckets
// launched by ready(), allreduce_async) runs on a background thread the allreducer owns;
// while such work is in flight the transport is used ONLY from that thread, and
// synchronous calls first wait for it to drain, so a transport sees one thread at a
// time. With transport::mpi that needs MPI_THREAD_SERIALIZED (MPI_THREAD_MULTIPLE if the
// application makes its own MPI calls while gradsync work is in flight); the level is
// checked at construction. allreducer_options::background_thread = false runs async
// work on the caller instead (no overlap, any MPI thread level).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "gradsync/algo/composition.hpp"
#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/hierarchical.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/compress/cast.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/compress/none.hpp"
#include "gradsync/core/async.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/detail/allreducer_batch.hpp"
#include "gradsync/fusion/arena.hpp"
#include "gradsync/fusion/bucket.hpp"
#include "gradsync/fusion/concept.hpp"
#include "gradsync/fusion/none.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/fusion/plan_check.hpp"
#include "gradsync/fusion/tensor.hpp"
#include "gradsync/observe/metrics.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync {

/// Construction options of an allreducer.
struct allreducer_options {
  call_options call{};            ///< timeout and cross-rank checks of every collective
  bool background_thread = true;  ///< false: async work runs on the caller when launched
  /// Nice steps the background thread lowers its priority by, so the caller's compute
  /// thread gets its core back as soon as it wakes (docs/fusion.md, "Priority"); 0 keeps
  /// the caller's priority. Default 10, or GRADSYNC_PROGRESS_NICE (0..19) when set.
  int progress_nice = detail::progress_nice_from_env(10);
  std::string timeline = observe::timeline::env_path();  ///< Chrome-trace path; "" = off
  /// Bucket cap in bytes, chosen at run time: 0 keeps the fusion policy's Bytes; else it
  /// replaces them (first bucket min(1 MiB, it)), so one instantiation serves every
  /// size. Needs a fusing policy; part of the plan every rank must agree on.
  std::size_t bucket_bytes = 0;
  /// Directory for a Prometheus textfile of this rank (observe/metrics.hpp); "" = off.
  /// Default: GRADSYNC_METRICS.
  std::string metrics = observe::metrics_file::env_dir();
  /// The file's name, `<metrics_job>.rank<R>.prom`: give each allreducer of a process its own.
  std::string metrics_job = "gradsync";
};

template <class Transport,  ///< who moves the bytes (transport_policy, or a two_level)
          class Algorithm,  ///< how ranks combine (algorithm_for<., Transport>; hierarchical)
          class Fusion = fusion::none,         ///< how tensors become messages (fusion_policy)
          class Compression = compress::none>  ///< what goes on the wire (compress/)
class allreducer : private detail::batch_runner<Transport, Algorithm, Fusion, Compression> {
  static constexpr bool two_level = transport::is_two_level_v<Transport>;
  static_assert(transport_policy<Transport> || two_level,
                "gradsync::allreducer: the first parameter must satisfy gradsync::transport_policy "
                "(transport::local, shm, mpi, nccl or cuda_ipc) or be a transport::two_level");
  static_assert(two_level || algorithm_for<Algorithm, Transport>,
                "gradsync::allreducer: the second parameter must be an algorithm for this "
                "transport (algo::ring, tree, halving_doubling, auto_select, ...); "
                "algo::hierarchical needs a transport::two_level");
  static_assert(!two_level || detail::is_hierarchical<Algorithm>,
                "gradsync::allreducer: over a transport::two_level the algorithm must be "
                "algo::hierarchical<InterAlgo> (e.g. algo::hierarchical<algo::ring>)");
  static_assert(fusion::fusion_policy<Fusion>,
                "gradsync::allreducer: the third parameter must be a fusion policy; use "
                "fusion::none, fusion::bucket<Bytes> or fusion::zero_copy<Bytes>");
  static_assert(compress::compression_policy<Compression>,
                "gradsync::allreducer: the fourth parameter must be a compression policy; use "
                "compress::none, fp16, bf16, int8<> or topk<> (error_feedback<C> around a lossy "
                "one)");
  static_assert(std::is_same_v<Compression, compress::none> ||
                    Transport::memory == memory_space::host,
                "gradsync::allreducer: compression codes buckets on the host (casts, int8, "
                "topk); with a device-memory transport use compress::none");

  using base = detail::batch_runner<Transport, Algorithm, Fusion, Compression>;
  using batch = typename base::batch;

 public:
  using transport_type = Transport;      ///< the Transport parameter
  using algorithm_type = Algorithm;      ///< the Algorithm parameter
  using fusion_type = Fusion;            ///< the Fusion parameter
  using compression_type = Compression;  ///< the Compression parameter

  /// Borrows `t`; the transport must outlive the allreducer.
  explicit allreducer(Transport& t, call_options opt = {})
      : allreducer(t, allreducer_options{opt}) {}
  /// Borrows `t`, with the deadline, progress thread, timeline, bucket cap and metrics of `o`.
  allreducer(Transport& t, allreducer_options o)
      : base(t, o.call, o.timeline, o.bucket_bytes, o.metrics, o.metrics_job),
        bg_(o.background_thread, o.progress_nice) {
    if (o.background_thread) detail::check_thread_level(t);
    log(log_level::info, t.rank(),
        "allreducer: transport=%s algorithm=%s fusion=%s (bucket %zu B, first %zu B) "
        "compression=%s ranks=%zu progress=%s timeline=%s",
        std::string(Transport::name).c_str(), std::string(Algorithm::name).c_str(),
        std::string(Fusion::name).c_str(), this->bucket_bytes_, this->first_bucket_bytes_,
        std::string(Compression::name).c_str(), t.size(), o.background_thread ? "thread" : "inline",
        this->tl_.enabled() ? this->tl_.path().c_str() : "off");
  }
  allreducer(const allreducer&) = delete;
  allreducer& operator=(const allreducer&) = delete;

  /// Joins the progress thread: work not yet started is failed (its handles report it),
  /// the running collective finishes or hits its deadline. Then writes the timeline and
  /// the metrics file.
  ~allreducer() {
    bg_.stop();
    if (step_ && next_launch_ < this->plan_.buckets.size()) {
      auto e = std::make_exception_ptr(
          error(errc::invalid_argument, {this->t_.rank(), error_site::npos, ~std::uint64_t{0}},
                "the allreducer was destroyed before every tensor of the step was marked ready"));
      for (std::size_t b = next_launch_; b < this->plan_.buckets.size(); ++b)
        step_->done->finish_one(e);
    }
    if (this->tl_.enabled() && !this->tl_.write()) {
      log(log_level::warn, this->t_.rank(), "cannot write timeline %s", this->tl_.path().c_str());
    }
    this->publish_metrics();
  }

  // ---- one tensor, and grouped lists -------------------------------------------------

  /// In-place allreduce of one tensor, on the calling thread (after queued work drains).
  template <class T, class Op>
  void allreduce(std::span<T> data, Op op) {
    check_call<std::remove_const_t<T>, Op>();
    const tensor_ref one(data);
    run_list(std::span<const tensor_ref>(&one, 1), op, false,
             element_types<std::remove_const_t<T>>{})
        .wait();  // the errors of the inline run come out here
  }
  /// Queues an in-place allreduce of one tensor on the progress thread.
  template <class T, class Op>
  pending allreduce_async(std::span<T> data, Op op) {
    check_call<std::remove_const_t<T>, Op>();
    const tensor_ref one(data);
    return run_list(std::span<const tensor_ref>(&one, 1), op, true,
                    element_types<std::remove_const_t<T>>{});
  }
  /// Grouped call: reduces every tensor of `list` in place, fused into buckets of the
  /// Fusion policy (fusion::none: one collective per tensor). Every rank passes the same
  /// counts and types in the same order.
  template <class Op>
  void allreduce(std::span<const tensor_ref> list, Op op) {
    run_list(list, op, false, typename base::all_types{}).wait();
  }
  /// The grouped call, queued on the progress thread.
  template <class Op>
  pending allreduce_async(std::span<const tensor_ref> list, Op op) {
    return run_list(list, op, true, typename base::all_types{});
  }
  /// The grouped call over tensors of one type T (instantiates T's steps only).
  template <class T, class Op>
  void allreduce(const std::vector<std::span<T>>& list, Op op) {
    check_call<std::remove_const_t<T>, Op>();
    const std::vector<tensor_ref> refs(list.begin(), list.end());
    run_list(std::span<const tensor_ref>(refs), op, false, element_types<std::remove_const_t<T>>{})
        .wait();
  }

  // ---- registered tensors: a static bucket plan ----------------------------------------

  /// Registers a gradient tensor that lives in the caller's memory; returns its index.
  template <class T>
  std::size_t add(std::span<T> grad, std::string name = {}) {
    static_assert(!fusion::is_zero_copy_v<Fusion> || sizeof(T) == 0,
                  "gradsync::allreducer with fusion::zero_copy owns the gradients: register "
                  "them with add<T>(count) and write them through view<T>(i), or use "
                  "fusion::bucket<Bytes> to keep them in your own memory");
    return this->register_tensor(tensor_ref(grad), std::move(name));
  }
  /// The same for a tensor that is a row-major rows x cols matrix (rows * cols elements),
  /// which compress::powersgd compresses as one; the shape is part of the plan every rank
  /// must agree on.
  template <class T>
  std::size_t add(std::span<T> grad, std::string name, matrix_shape shape) {
    static_assert(!fusion::is_zero_copy_v<Fusion> || sizeof(T) == 0,
                  "gradsync::allreducer with fusion::zero_copy owns the gradients: register "
                  "them with add<T>(count) and write them through view<T>(i), or use "
                  "fusion::bucket<Bytes> to keep them in your own memory");
    return this->register_tensor(tensor_ref(grad), std::move(name), shape);
  }
  /// Zero-copy: registers a tensor of `count` elements of T that gradsync allocates in
  /// its arena (available through view<T>(i) after commit()); returns its index.
  template <class T>
  std::size_t add(std::size_t count, std::string name = {}) {
    static_assert(fusion::is_zero_copy_v<Fusion> && is_element_type_v<T>,
                  "gradsync::allreducer::add<T>(count) allocates the gradient in gradsync's "
                  "arena and needs fusion::zero_copy<Bytes>; with other fusion policies pass "
                  "your tensor as add(std::span<T>)");
    return this->register_tensor(tensor_ref(nullptr, count, dtype_of<T>::value), std::move(name));
  }
  /// Computes the bucket plan and checks, with every rank, that all registered the same
  /// list (errc::mismatch naming the first differing tensor otherwise). Collective.
  template <class Op = op::sum_t>
  void commit(Op op = {}) {
    commit(op, typename base::all_types{});
  }
  /// The same, instantiating the steps for the listed element types only (a trainer of
  /// floats: element_types<float>{}); a registered tensor of another type is refused
  /// here, naming it.
  template <class Op, class... Ts>
  void commit(Op op, element_types<Ts...> types) {
    bg_.drain();
    this->commit_plan(op, types);
    step_runners_ = base::template runners<Op>(types);
  }
  /// Zero-copy: tensor i's storage in the arena (valid for the allreducer's lifetime).
  template <class T>
  std::span<T> view(std::size_t i) {
    return this->template arena_view<T>(i);
  }
  /// The committed bucket plan (empty before commit()).
  const fusion::plan& plan() const { return this->plan_; }
  /// How many tensors are registered.
  std::size_t tensor_count() const { return this->descs_.size(); }

  /// Marks registered tensor i's gradient final for this step; launches, in plan order,
  /// every bucket whose tensors are now all ready. A step is open from its first ready()
  /// until wait() or allreduce_async() ends it; the next ready() opens the next step.
  void ready(std::size_t i) {
    this->check_index(i);
    start_step_if_needed();
    if (ready_[i]) {
      throw error(errc::invalid_argument, {this->t_.rank(), error_site::npos, ~std::uint64_t{0}},
                  "tensor #" + std::to_string(i) + this->tensor_label(i) +
                      " was marked ready twice in one step; call wait() to end the step first");
    }
    ready_[i] = 1;
    --missing_[this->plan_.tensor_bucket[i]];
    launch_ready_buckets();
  }
  /// Ends the open step (or opens and ends a new one): marks every tensor not yet marked
  /// ready and returns the step's handle. Wait on it (or call wait()) before the next
  /// ready().
  pending allreduce_async() {
    this->require_committed();
    start_step_if_needed();
    launch_rest();
    phase_ = step_phase::closed;
    return pending(step_->done);
  }
  /// Ends the step: launches what is left (tensors not marked count as ready) and waits
  /// for every bucket; the results are then in the tensors (or the arena). Rethrows the
  /// first error of the step. After allreduce_async() it waits for that step, unless
  /// its handle was already waited on; with no step open it runs a whole step.
  void wait() {
    this->require_committed();
    const auto t0 = std::chrono::steady_clock::now();
    if (phase_ == step_phase::closed && step_->done->waited()) phase_ = step_phase::idle;
    if (phase_ != step_phase::closed) {  // idle: a whole step with every tensor ready
      start_step_if_needed();
      launch_rest();
    }
    phase_ = step_phase::idle;
    pending(step_->done).wait();
    this->tl_.complete("wait", observe::track::caller, t0, std::chrono::steady_clock::now());
  }
  /// True when the current step (if any) has completed.
  bool test() const { return !step_ || step_->done->done(); }

  // ---- observability -------------------------------------------------------------------

  /// Statistics of the last completed call (step, grouped call or tensor).
  observe::call_stats last_stats() const { return this->stats_snapshot().first; }
  /// Totals over every completed call.
  observe::cumulative_stats total_stats() const { return this->stats_snapshot().second; }
  /// One line for trainers to print, e.g. every N steps.
  std::string summary() const {
    const auto s = this->stats_snapshot();
    return observe::summary_line(this->t_.rank(), s.first, s.second);
  }
  /// The timeline (GRADSYNC_TIMELINE); write() flushes it to its file now.
  const observe::timeline& timeline() const { return this->tl_; }

  /// The borrowed transport.
  Transport& transport() { return this->t_; }
  /// The options every collective of this allreducer runs with.
  const call_options& options() const { return this->opt_; }

 private:
  /// The composition checks of one call with element type T and op Op.
  template <class T, class Op>
  static constexpr void check_call() {
    if constexpr (two_level) {
      check_two_level_composition<Algorithm, typename Transport::intra_type,
                                  typename Transport::inter_type, T, Op>();
    } else {
      check_composition<Algorithm, Transport, T, Op>();
    }
  }

  /// `types`: the element types to instantiate steps for (a typed call's T only; a list
  /// of tensor_refs: all of them).
  template <class Op, class Types>
  [[nodiscard]] pending run_list(std::span<const tensor_ref> list, Op op, bool async, Types types) {
    (void)op;
    this->throw_if_broken();
    if (!async || !bg_.enabled()) bg_.drain();
    auto b = this->make_list_batch(list, base::template runners<Op>(types));
    const observe::track tr =
        async && bg_.enabled() ? observe::track::progress : observe::track::caller;
    for (std::size_t k = 0; k < b->plan->buckets.size(); ++k) post(b, k, tr, async);
    if (b->plan->buckets.empty()) this->finish_empty(*b);
    return pending(b->done);
  }

  void post(const std::shared_ptr<batch>& b, std::size_t k, observe::track tr, bool async) {
    if (!async) {
      const auto now = std::chrono::steady_clock::now();
      this->run_bucket(*b, k, {now, now}, tr);
      return;
    }
    bg_.post({[this, b, k, tr](const job_times& jt) { this->run_bucket(*b, k, jt, tr); },
              [b](std::exception_ptr e) { b->done->finish_one(e); }});
  }

  void start_step_if_needed() {
    const std::size_t nb = this->plan_.buckets.size();
    if (phase_ == step_phase::open) return;  // the current step is still being filled
    this->throw_if_broken();
    if (step_ && !step_->done->done()) {
      throw error(errc::invalid_argument, {this->t_.rank(), error_site::npos, ~std::uint64_t{0}},
                  "the previous step is still in flight; call wait() (or wait on its handle) "
                  "before marking gradients of the next step");
    }
    step_ = this->make_step_batch(step_runners_);
    ready_.assign(this->descs_.size(), 0);
    missing_.resize(nb);
    for (std::size_t k = 0; k < nb; ++k) missing_[k] = this->plan_.buckets[k].tensors.size();
    next_launch_ = 0;
    phase_ = step_phase::open;
    if (nb == 0) this->finish_empty(*step_);
  }

  void launch_rest() {
    for (std::size_t i = 0; i < ready_.size(); ++i) {
      if (!ready_[i]) {
        ready_[i] = 1;
        --missing_[this->plan_.tensor_bucket[i]];
      }
    }
    launch_ready_buckets();
  }

  void launch_ready_buckets() {
    const std::size_t nb = this->plan_.buckets.size();
    const observe::track tr = bg_.enabled() ? observe::track::progress : observe::track::caller;
    while (next_launch_ < nb && missing_[next_launch_] == 0) post(step_, next_launch_++, tr, true);
  }

  progress_thread bg_;
  typename base::runner_table step_runners_{};
  std::shared_ptr<batch> step_;                  // the current step of registered tensors
  std::vector<std::uint8_t> ready_;              // tensor -> marked ready in this step
  std::vector<std::size_t> missing_;             // bucket -> tensors not yet ready
  std::size_t next_launch_ = 0;                  // next bucket to launch (plan order)
  enum class step_phase { idle, open, closed };  // closed: by allreduce_async, not waited
  step_phase phase_ = step_phase::idle;
};

}  // namespace gradsync
