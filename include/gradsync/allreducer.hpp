// SPDX-License-Identifier: Apache-2.0
// The façade: allreducer<Transport, Algorithm, Fusion, Compression> composes the four
// policies into one object that keeps state across calls: the bucket plan of a model's
// registered gradients, the background progress thread, statistics and the timeline.
// Its parts, one job each (detail/): tensor_registry (registration, the agreed plan, the
// arena), bucket_runner (one bucket's collective or codec), batch (an operation's buckets,
// packed and unpacked), step_gate (which buckets of a step may launch), staging_pool,
// call_ledger (statistics, failures, metrics). The façade orders the work and owns the
// progress thread.
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
#include "gradsync/core/flight_recorder.hpp"
#include "gradsync/core/function_ref.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/detail/batch.hpp"
#include "gradsync/detail/bucket_runner.hpp"
#include "gradsync/detail/call_ledger.hpp"
#include "gradsync/detail/staging_pool.hpp"
#include "gradsync/detail/step_gate.hpp"
#include "gradsync/detail/tensor_registry.hpp"
#include "gradsync/detail/thread_level.hpp"
#include "gradsync/fusion/arena.hpp"
#include "gradsync/fusion/bucket.hpp"
#include "gradsync/fusion/concept.hpp"
#include "gradsync/fusion/none.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/fusion/tensor.hpp"
#include "gradsync/observe/metrics.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync {

namespace detail {
/// "bucket 3 of 12: #40 'fc1.weight', #41 'fc1.bias', ... (5 tensors)" per bucket of `p`
/// (`label(i)`: tensor i's " 'name'" or ""): how stall warnings and the flight recorder
/// name a registered bucket.
inline std::vector<std::string> bucket_labels(const fusion::plan& p,
                                              function_ref<std::string(std::size_t)> label) {
  std::vector<std::string> out;
  for (std::size_t k = 0; k < p.buckets.size(); ++k) {
    const auto& ts = p.buckets[k].tensors;
    std::string l = "bucket " + std::to_string(k) + " of " + std::to_string(p.buckets.size()) + ":";
    for (std::size_t j = 0; j < ts.size() && j < 3; ++j)
      l += (j ? ", #" : " #") + std::to_string(ts[j]) + label(ts[j]);
    if (ts.size() > 3) l += ", ... (" + std::to_string(ts.size()) + " tensors)";
    out.push_back(std::move(l));
  }
  return out;
}
}  // namespace detail

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
  /// Where the flight recorder writes this rank's last calls when one fails
  /// (`<path>.rank<R>.json`, core/flight_recorder.hpp); "" = stderr. Default:
  /// GRADSYNC_FLIGHT_RECORDER.
  std::string flight_recorder = gradsync::flight_recorder::env_path();
  /// How many calls the flight recorder keeps.
  std::size_t flight_depth = 64;
};

template <class Transport,  ///< who moves the bytes (transport_policy, or a two_level)
          class Algorithm,  ///< how ranks combine (algorithm_for<., Transport>; hierarchical)
          class Fusion = fusion::none,         ///< how tensors become messages (fusion_policy)
          class Compression = compress::none>  ///< what goes on the wire (compress/)
class allreducer {
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

  using steady = std::chrono::steady_clock;
  using runner = detail::bucket_runner<Transport, Algorithm, Compression>;
  using step_table = typename runner::step_table;
  using batch = detail::batch<step_table>;
  /// The element types built unless commit() is given a list. No int8: int8_t is
  /// compress::int8's wire type, and a slot would build every algorithm for it.
  using all_types = element_types<float, double, half, bfloat16, std::int32_t, std::int64_t>;

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
      : t_(t),
        recorder_(std::make_unique<gradsync::flight_recorder>(o.flight_recorder, t.rank(),
                                                              o.flight_depth)),
        opt_(recorded_options(o.call, recorder_.get())),
        tl_(o.timeline, t.rank()),
        ledger_(t.rank(), t.size(), o.metrics, o.metrics_job,
                "transport=\"" + std::string(Transport::name) + "\",algorithm=\"" +
                    std::string(Algorithm::name) + "\",fusion=\"" + std::string(Fusion::name) +
                    "\",compression=\"" + std::string(Compression::name) + "\""),
        reg_(t.rank(), o.bucket_bytes),
        pool_(t),
        runner_(t, opt_, tl_, pool_),
        stall_(stall_threshold(opt_.timeout.count() < 0 ? default_timeout() : opt_.timeout)),
        bg_(o.background_thread, o.progress_nice) {
    if (o.background_thread) detail::check_thread_level(t);
    log(log_level::info, t.rank(),
        "allreducer: transport=%s algorithm=%s fusion=%s (bucket %zu B, first %zu B) "
        "compression=%s ranks=%zu progress=%s timeline=%s",
        std::string(Transport::name).c_str(), std::string(Algorithm::name).c_str(),
        std::string(Fusion::name).c_str(), reg_.bucket_bytes(), reg_.first_bucket_bytes(),
        std::string(Compression::name).c_str(), t.size(), o.background_thread ? "thread" : "inline",
        tl_.enabled() ? tl_.path().c_str() : "off");
  }
  allreducer(const allreducer&) = delete;
  allreducer& operator=(const allreducer&) = delete;

  /// Joins the progress thread: work not yet started is failed (its handles report it),
  /// the running collective finishes or hits its deadline. Then writes the timeline and
  /// the metrics file.
  ~allreducer() {
    bg_.stop();
    if (step_ && gate_.next() < reg_.plan().buckets.size()) {
      auto e = std::make_exception_ptr(
          error(errc::invalid_argument, site(),
                "the allreducer was destroyed before every tensor of the step was marked ready"));
      for (std::size_t b = gate_.next(); b < reg_.plan().buckets.size(); ++b)
        step_->done->finish_one(e);
    }
    if (tl_.enabled() && !tl_.write()) {
      log(log_level::warn, t_.rank(), "cannot write timeline %s", tl_.path().c_str());
    }
    ledger_.publish();
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
    run_list(list, op, false, all_types{}).wait();
  }
  /// The grouped call, queued on the progress thread.
  template <class Op>
  pending allreduce_async(std::span<const tensor_ref> list, Op op) {
    return run_list(list, op, true, all_types{});
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
    return reg_.add(tensor_ref(grad), std::move(name));
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
    return reg_.add(tensor_ref(grad), std::move(name), shape);
  }
  /// Zero-copy: registers a tensor of `count` elements of T that gradsync allocates in
  /// its arena (available through view<T>(i) after commit()); returns its index.
  template <class T>
  std::size_t add(std::size_t count, std::string name = {}) {
    static_assert(fusion::is_zero_copy_v<Fusion> && is_element_type_v<T>,
                  "gradsync::allreducer::add<T>(count) allocates the gradient in gradsync's "
                  "arena and needs fusion::zero_copy<Bytes>; with other fusion policies pass "
                  "your tensor as add(std::span<T>)");
    return reg_.add(tensor_ref(nullptr, count, dtype_of<T>::value), std::move(name));
  }
  /// Computes the bucket plan and checks, with every rank, that all registered the same
  /// list (errc::mismatch naming the first differing tensor otherwise). Collective.
  template <class Op = op::sum_t>
  void commit(Op op = {}) {
    commit(op, all_types{});
  }
  /// The same, instantiating the steps for the listed element types only (a trainer of
  /// floats: element_types<float>{}); a registered tensor of another type is refused
  /// here, naming it.
  template <class Op, class... Ts>
  void commit(Op, element_types<Ts...> types) {
    using listed = element_types<Ts...>;
    bg_.drain();
    const step_table table = runner::template steps<Op>(types);
    reg_.commit(t_, opt_.make_deadline(), op_name(Op::id), [&](std::size_t i) {
      const dtype d = reg_.desc(i).type;
      if (!table[static_cast<std::size_t>(d)]) {
        throw error(errc::invalid_argument, site(),
                    "tensor #" + std::to_string(i) + reg_.label(i) + " is " +
                        std::string(dtype_name(d)) + runner::template refusal<listed>(d, Op::id));
      }
    });
    plan_chosen_ = runner_.choices(reg_.plan());  // the same for every step of this plan
    bucket_labels_ =
        detail::bucket_labels(reg_.plan(), [&](std::size_t i) { return reg_.label(i); });
    codec_state_.assign(reg_.plan().buckets.size(), nullptr);  // a new plan starts codecs afresh
    step_steps_ = table;
  }
  /// Zero-copy: tensor i's storage in the arena (valid for the allreducer's lifetime).
  template <class T>
  std::span<T> view(std::size_t i) {
    static_assert(fusion::is_zero_copy_v<Fusion> && is_element_type_v<T>,
                  "gradsync::allreducer::view<T>(i) needs fusion::zero_copy<Bytes>");
    return reg_.template view<T>(i);
  }
  /// The committed bucket plan (empty before commit()).
  const fusion::plan& plan() const { return reg_.plan(); }
  /// How many tensors are registered.
  std::size_t tensor_count() const { return reg_.size(); }

  /// Marks registered tensor i's gradient final for this step; launches, in plan order,
  /// every bucket whose tensors are now all ready. A step is open from its first ready()
  /// until wait() or allreduce_async() ends it; the next ready() opens the next step.
  void ready(std::size_t i) {
    reg_.check_index(i);
    start_step_if_needed();
    if (!gate_.mark(i)) {
      throw error(errc::invalid_argument, site(),
                  "tensor #" + std::to_string(i) + reg_.label(i) +
                      " was marked ready twice in one step; call wait() to end the step first");
    }
    launch_ready_buckets();
  }
  /// Ends the open step (or opens and ends a new one): marks every tensor not yet marked
  /// ready and returns the step's handle. Wait on it (or call wait()) before the next
  /// ready().
  pending allreduce_async() {
    reg_.require_committed();
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
    reg_.require_committed();
    const auto t0 = steady::now();
    if (phase_ == step_phase::closed && step_->done->waited()) phase_ = step_phase::idle;
    if (phase_ != step_phase::closed) {  // idle: a whole step with every tensor ready
      start_step_if_needed();
      launch_rest();
    }
    phase_ = step_phase::idle;
    pending(step_->done).wait();
    tl_.complete("wait", observe::track::caller, t0, steady::now());
  }
  /// True when the current step (if any) has completed.
  bool test() const { return !step_ || step_->done->done(); }

  // ---- observability -------------------------------------------------------------------

  /// Statistics of the last completed call (step, grouped call or tensor).
  observe::call_stats last_stats() const { return ledger_.snapshot().first; }
  /// Totals over every completed call.
  observe::cumulative_stats total_stats() const { return ledger_.snapshot().second; }
  /// One line for trainers to print, e.g. every N steps.
  std::string summary() const {
    const auto s = ledger_.snapshot();
    return observe::summary_line(t_.rank(), s.first, s.second);
  }
  /// The timeline (GRADSYNC_TIMELINE); write() flushes it to its file now.
  const observe::timeline& timeline() const { return tl_; }

  /// The borrowed transport.
  Transport& transport() { return t_; }
  /// The options every collective of this allreducer runs with.
  const call_options& options() const { return opt_; }

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

  error_site site() const { return {t_.rank(), error_site::npos, ~std::uint64_t{0}}; }

  // The options of every collective: the user's, recorded by this allreducer's recorder
  // unless they name their own.
  static call_options recorded_options(call_options o, gradsync::flight_recorder* r) {
    if (!o.recorder) o.recorder = r;
    return o;
  }

  // ---- batches: made here, run bucket by bucket on whatever thread posts them ------------

  /// `types`: the element types to instantiate steps for (a typed call's T only; a list
  /// of tensor_refs: all of them).
  template <class Op, class Types>
  [[nodiscard]] pending run_list(std::span<const tensor_ref> list, Op, bool async, Types types) {
    ledger_.throw_if_broken();
    if (!async || !bg_.enabled()) bg_.drain();
    auto b = make_list_batch(list, runner::template steps<Op>(types));
    const observe::track tr =
        async && bg_.enabled() ? observe::track::progress : observe::track::caller;
    for (std::size_t k = 0; k < b->plan->buckets.size(); ++k) post(b, k, tr, async);
    if (b->plan->buckets.empty()) ledger_.fold(std::move(b->stats));
    return pending(b->done);
  }

  std::shared_ptr<batch> make_list_batch(std::span<const tensor_ref> list,
                                         const step_table& table) {
    auto b = std::make_shared<batch>();
    std::vector<fusion::tensor_desc> descs(list.size());
    b->own_ptrs.resize(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].data && list[i].count) {
        throw error(errc::invalid_argument, site(),
                    "tensor #" + std::to_string(i) + " of the list has a null pointer");
      }
      if (!table[static_cast<std::size_t>(list[i].type)]) {
        throw error(errc::invalid_argument, site(),
                    "tensor #" + std::to_string(i) + " of the list is " +
                        std::string(dtype_name(list[i].type)) +
                        (list[i].type == dtype::i8
                             ? runner::int8_refusal()
                             : ", which the op cannot take (op::avg needs a floating-point type)"));
      }
      descs[i] = {list[i].count, list[i].type, {}};
      b->own_ptrs[i] = list[i].data;
    }
    // Grouped calls keep the caller's order: there is no backward pass to follow.
    b->own_plan = fusion::make_plan(descs, reg_.bucket_bytes(), reg_.first_bucket_bytes(),
                                    fusion::order::registration);
    b->plan = &b->own_plan;
    b->ptrs = &b->own_ptrs;
    if (std::any_of(b->own_plan.buckets.begin(), b->own_plan.buckets.end(),
                    [](const auto& k) { return k.tensors.size() > 1; })) {
      b->staging = pool_.acquire(b->own_plan.layout_bytes);
      b->layout = b->staging->data();
    }
    b->steps = table;
    init_batch(*b, runner_.choices(b->own_plan));
    return b;
  }

  std::shared_ptr<batch> make_step_batch() {
    auto b = std::make_shared<batch>();
    b->plan = &reg_.plan();
    b->ptrs = &reg_.ptrs();
    b->layout = reg_.layout();
    b->packed = !fusion::is_zero_copy_v<Fusion>;
    b->registered = true;
    b->steps = step_steps_;
    init_batch(*b, plan_chosen_);
    return b;
  }

  void init_batch(batch& b, const std::string& chosen) {
    const std::size_t nb = b.plan->buckets.size();
    b.done = std::make_shared<detail::completion>(nb);
    b.jobs_left = nb;
    b.stats.ranks = t_.size();
    b.stats.algorithm = Algorithm::name;
    b.stats.chosen = chosen;
    b.stats.fusion = Fusion::name;
    b.stats.compression = Compression::name;
    b.stats.buckets = nb;
    b.stats.tensors = b.plan->tensor_bucket.size();
    b.stats.bytes_in = b.plan->payload_bytes;
    b.stats.per_bucket.assign(nb, {});
  }

  void post(const std::shared_ptr<batch>& b, std::size_t k, observe::track tr, bool async) {
    if (!async) {
      const auto now = steady::now();
      run_bucket(*b, k, {now, now}, tr);
      return;
    }
    bg_.post({[this, b, k, tr](const job_times& jt) { run_bucket(*b, k, jt, tr); },
              [b](std::exception_ptr e) { b->done->finish_one(e); }});
  }

  /// Pack, reduce and unpack bucket k of `b`; never throws (errors go to b.done).
  void run_bucket(batch& b, std::size_t k, const job_times& jt, observe::track tr) {
    std::exception_ptr err;
    if (!b.done->failed()) {
      try {
        ledger_.throw_if_broken();
        const auto start = std::max(jt.idle_since, b.created);
        if (start < jt.picked) {
          runner_.event("wait_gradients", tr, start, jt.picked,
                        [&] { return "\"bucket\":" + std::to_string(k); });
        }
        bucket_body(b, k, tr);
      } catch (...) {
        err = std::current_exception();
        ledger_.note_failure(err, k);
      }
    }
    if (--b.jobs_left == 0) {
      if (b.staging) pool_.release(std::move(b.staging));
      if (!err && !b.done->failed()) ledger_.fold(std::move(b.stats));
    }
    b.done->finish_one(err);
  }

  void bucket_body(batch& b, std::size_t k, observe::track tr) {
    const auto& bk = b.plan->buckets[k];
    auto copy = [&](const char* name, auto&& f) {
      const auto c0 = steady::now();
      f();
      const auto c1 = steady::now();
      runner_.event(name, tr, c0, c1, [&] { return "\"bucket\":" + std::to_string(k); });
      b.stats.pack_seconds += std::chrono::duration<double>(c1 - c0).count();
    };
    if (opt_.check_finite && is_floating_dtype(bk.type)) {
      check_finite(b, k, copy);
    } else if (b.copies(k)) {
      copy("pack", [&] { b.pack(k); });
    }
    if (b.registered) {
      runner_.set_label(bucket_labels_[k]);
    } else {
      list_label_.assign("bucket ");  // reuses the string's room: no allocation per call
      list_label_ += std::to_string(k);
      list_label_ += " of a grouped call";
      runner_.set_label(list_label_);
    }
    const auto t0 = steady::now();
    const std::size_t wire0 = b.stats.bytes_wire, encoded0 = b.stats.bytes_encoded;
    runner_.run(
        b.steps, bk.type, b.bucket_data(k), bk.count, b.registered ? &codec_state_[k] : nullptr,
        b.registered ? reg_.parts(k) : std::span<const compress::tensor_part>(), tr, b.stats);
    const auto t1 = steady::now();
    b.stats.seconds += std::chrono::duration<double>(t1 - t0).count();
    if (t1 - t0 > stall_) ++b.stats.stalls;
    b.stats.per_bucket[k] = {bk.bytes(), b.stats.bytes_encoded - encoded0,
                             b.stats.bytes_wire - wire0};
    runner_.event("allreduce", tr, t0, t1, [&] {
      return "\"bucket\":" + std::to_string(k) + ",\"bytes\":" + std::to_string(bk.bytes()) +
             ",\"tensors\":" + std::to_string(bk.tensors.size()) + ",\"algorithm\":\"" +
             std::string(Algorithm::name) + "\"";
    });
    if (b.copies(k)) copy("unpack", [&] { b.unpack(k); });
  }

  /// check_finite for bucket k: its pack pass (or a pass over the tensors in place)
  /// finds this rank's first NaN or Inf, and the ranks agree; errc::non_finite on every
  /// rank, naming the first rank's tensor, before the bucket is reduced.
  template <class Copy>
  void check_finite(batch& b, std::size_t k, Copy& copy) {
    typename batch::non_finite found;
    copy(b.copies(k) ? "pack" : "check_finite", [&] { found = b.pack_checked(k); });
    finite_finding mine;
    visit_dtype(b.plan->buckets[k].type, [&](auto tv) {
      using T = decltype(tv);
      mine = detail::make_finding(found.tensor, found.index, static_cast<const T*>(found.value),
                                  t_.rank(), runner_.describe_self());
    });
    runner_.agree_finite(mine, [&](std::size_t i) {
      return "tensor #" + std::to_string(i) +
             (b.registered ? reg_.label(i) : std::string(" of the list"));
    });
  }

  // ---- the step of registered tensors -----------------------------------------------------

  void start_step_if_needed() {
    if (phase_ == step_phase::open) return;  // the current step is still being filled
    ledger_.throw_if_broken();
    if (step_ && !step_->done->done()) {
      throw error(errc::invalid_argument, site(),
                  "the previous step is still in flight; call wait() (or wait on its handle) "
                  "before marking gradients of the next step");
    }
    step_ = make_step_batch();
    gate_.open(reg_.plan());
    phase_ = step_phase::open;
    if (reg_.plan().buckets.empty()) ledger_.fold(std::move(step_->stats));
  }

  void launch_rest() {
    gate_.mark_rest();
    launch_ready_buckets();
  }

  void launch_ready_buckets() {
    const observe::track tr = bg_.enabled() ? observe::track::progress : observe::track::caller;
    gate_.launch_ready([&](std::size_t k) { post(step_, k, tr, true); });
  }

  Transport& t_;
  std::unique_ptr<gradsync::flight_recorder> recorder_;  // the last calls, for failures
  call_options opt_;
  observe::timeline tl_;
  detail::call_ledger ledger_;
  detail::tensor_registry<Fusion> reg_;
  detail::staging_pool<Transport> pool_;
  runner runner_;
  seconds_d stall_;  // a collective this long is a stall
  // The codec's state of each bucket of the plan (error-feedback residuals), made on
  // first use; only the job running bucket k touches slot k.
  std::vector<std::shared_ptr<void>> codec_state_;
  std::string plan_chosen_;                 // runner_.choices(plan), set by commit
  std::vector<std::string> bucket_labels_;  // labels_of(plan), set by commit
  std::string list_label_;                  // a grouped call's bucket, while it runs
  step_table step_steps_{};                 // the registered plan's steps
  progress_thread bg_;
  std::shared_ptr<batch> step_;  // the current step of registered tensors
  detail::step_gate gate_;
  enum class step_phase { idle, open, closed };  // closed: by allreduce_async, not waited
  step_phase phase_ = step_phase::idle;
};

}  // namespace gradsync
