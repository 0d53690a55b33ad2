// SPDX-License-Identifier: Apache-2.0
// The façade: allreducer<Transport, Algorithm, Fusion, Compression> composes the four
// policies into one object that keeps state across calls: the bucket plan of a model's
// registered gradients, the background progress thread, statistics and the timeline.
// Its parts, one job each (allreducer/, in namespace detail): allreducer_core (what does
// not depend on the policies: ordering the work, the progress thread, statistics; compiled
// once), which composes tensor_registry (registration, the agreed plan, the arena), batch (an
// operation's buckets, packed and unpacked), step_gate (which buckets of a step may
// launch), staging_pool and call_ledger (statistics, failures, metrics); and
// bucket_runner (one bucket's collective or codec, per composition). The façade checks
// the composition and turns typed calls into step tables.
// Transport is one transport, or a group with levels (transport/levels.hpp) with
// algo::hierarchical (buckets go through the node's transport and across nodes;
// everything else is the same).
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

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gradsync/algo/composition.hpp"
#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/hierarchical.hpp"
#include "gradsync/allreducer/allreducer_core.hpp"
#include "gradsync/allreducer/bucket_runner.hpp"
#include "gradsync/allreducer/thread_level.hpp"
#include "gradsync/allreducer_options.hpp"
#include "gradsync/compress/cast.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/compress/none.hpp"
#include "gradsync/core/async.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/fusion/bucket.hpp"
#include "gradsync/fusion/concept.hpp"
#include "gradsync/fusion/none.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/fusion/tensor.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync {

template <class Transport,  ///< who moves the bytes (transport_policy, or levels of them)
          class Algorithm,  ///< how ranks combine (algorithm_for<., Transport>; hierarchical)
          class Fusion = fusion::none,         ///< how tensors become messages (fusion_policy)
          class Compression = compress::none>  ///< what goes on the wire (compress/)
class allreducer {
  static_assert(transport::level_group<Transport>,
                "gradsync::allreducer: the first parameter must satisfy gradsync::transport_policy "
                "(transport::local, shm, mpi, nccl or cuda_ipc) or have levels "
                "(transport::leveled: see transport/levels.hpp)");
  // The composition table (algo/composition.hpp) decides; these two faults get the
  // allreducer's own words, the rest check_call's.
  static constexpr composition_fault fault = composition_fault_of<Algorithm, Transport>();
  static_assert(fault != composition_fault::not_an_algorithm &&
                    fault != composition_fault::needs_levels,
                "gradsync::allreducer: the second parameter must be an algorithm for this "
                "transport (algo::ring, tree, halving_doubling, auto_select, ...); "
                "algo::hierarchical needs a transport::two_level");
  static_assert(fault != composition_fault::flat_on_levels,
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

  using runner = detail::bucket_runner<Transport, Algorithm, Compression>;
  using step_table = detail::bucket_runner_base::step_table;
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
        shared_(t, o),
        runner_(t, shared_),
        core_(t, o, {Transport::name, Algorithm::name, Fusion::name, Compression::name},
              fusion::values_of<Fusion>(), shared_, runner_) {
    if (o.background_thread) detail::check_thread_level(t);
  }
  allreducer(const allreducer&) = delete;
  allreducer& operator=(const allreducer&) = delete;
  // The destructor joins the progress thread (the core goes first: work not yet started
  // is failed, its handles report it; the running collective finishes or hits its
  // deadline), then writes the timeline and the metrics file.

  // ---- one tensor, and grouped lists -------------------------------------------------

  /// In-place allreduce of one tensor, on the calling thread (after queued work drains).
  template <class T, class Op>
  void allreduce(std::span<T> data, Op op) {
    check_call<std::remove_const_t<T>, Op>();
    const tensor_ref one(data);
    core_
        .run_list(std::span<const tensor_ref>(&one, 1), false,
                  steps(op, element_types<std::remove_const_t<T>>{}))
        .wait();  // the errors of the inline run come out here
  }
  /// Queues an in-place allreduce of one tensor on the progress thread.
  template <class T, class Op>
  pending allreduce_async(std::span<T> data, Op op) {
    check_call<std::remove_const_t<T>, Op>();
    const tensor_ref one(data);
    return core_.run_list(std::span<const tensor_ref>(&one, 1), true,
                          steps(op, element_types<std::remove_const_t<T>>{}));
  }
  /// Grouped call: reduces every tensor of `list` in place, fused into buckets of the
  /// Fusion policy (fusion::none: one collective per tensor). Every rank passes the same
  /// counts and types in the same order.
  template <class Op>
  void allreduce(std::span<const tensor_ref> list, Op op) {
    core_.run_list(list, false, steps(op, all_types{})).wait();
  }
  /// The grouped call, queued on the progress thread.
  template <class Op>
  pending allreduce_async(std::span<const tensor_ref> list, Op op) {
    return core_.run_list(list, true, steps(op, all_types{}));
  }
  /// The grouped call over tensors of one type T (instantiates T's steps only).
  template <class T, class Op>
  void allreduce(const std::vector<std::span<T>>& list, Op op) {
    check_call<std::remove_const_t<T>, Op>();
    const std::vector<tensor_ref> refs(list.begin(), list.end());
    core_
        .run_list(std::span<const tensor_ref>(refs), false,
                  steps(op, element_types<std::remove_const_t<T>>{}))
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
    return core_.registry().add(tensor_ref(grad), std::move(name));
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
    return core_.registry().add(tensor_ref(grad), std::move(name), shape);
  }
  /// Zero-copy: registers a tensor of `count` elements of T that gradsync allocates in
  /// its arena (available through view<T>(i) after commit()); returns its index.
  template <class T>
  std::size_t add(std::size_t count, std::string name = {}) {
    static_assert(fusion::is_zero_copy_v<Fusion> && is_element_type_v<T>,
                  "gradsync::allreducer::add<T>(count) allocates the gradient in gradsync's "
                  "arena and needs fusion::zero_copy<Bytes>; with other fusion policies pass "
                  "your tensor as add(std::span<T>)");
    return core_.registry().add(tensor_ref(nullptr, count, dtype_of<T>::value), std::move(name));
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
    core_.commit(t_, runner::template steps<Op>(types), Op::id, &element_types<Ts...>::holds);
  }
  /// Zero-copy: tensor i's storage in the arena (valid for the allreducer's lifetime).
  template <class T>
  std::span<T> view(std::size_t i) {
    static_assert(fusion::is_zero_copy_v<Fusion> && is_element_type_v<T>,
                  "gradsync::allreducer::view<T>(i) needs fusion::zero_copy<Bytes>");
    return core_.registry().template view<T>(i);
  }
  /// The committed bucket plan (empty before commit()).
  const fusion::plan& plan() const { return core_.registry().plan(); }
  /// How many tensors are registered.
  std::size_t tensor_count() const { return core_.registry().size(); }

  /// Marks registered tensor i's gradient final for this step; launches, in plan order,
  /// every bucket whose tensors are now all ready. A step is open from its first ready()
  /// until wait() or allreduce_async() ends it; the next ready() opens the next step.
  void ready(std::size_t i) { core_.ready(i); }
  /// Ends the open step (or opens and ends a new one): marks every tensor not yet marked
  /// ready and returns the step's handle. Wait on it (or call wait()) before the next
  /// ready().
  pending allreduce_async() { return core_.allreduce_async(); }
  /// Ends the step: launches what is left (tensors not marked count as ready) and waits
  /// for every bucket; the results are then in the tensors (or the arena). Rethrows the
  /// first error of the step. After allreduce_async() it waits for that step, unless
  /// its handle was already waited on; with no step open it runs a whole step.
  void wait() { core_.wait(); }
  /// Forgets every bucket's compression state (error-feedback residuals, PowerSGD's
  /// warm-start Q), as a new plan does; between steps only (errc::invalid_argument in
  /// one). Call it on every rank at the same step: PowerSGD's Q must match across ranks.
  void reset_compression_state() { core_.reset_compression_state(); }
  /// True when the current step (if any) has completed.
  bool test() const { return core_.test(); }

  // ---- observability -------------------------------------------------------------------

  /// Statistics of the last completed call (step, grouped call or tensor).
  observe::call_stats last_stats() const { return core_.last_stats(); }
  /// Totals over every completed call.
  observe::cumulative_stats total_stats() const { return core_.total_stats(); }
  /// One line for trainers to print, e.g. every N steps.
  std::string summary() const { return core_.summary(); }
  /// The timeline (GRADSYNC_TIMELINE); write() flushes it to its file now.
  const observe::timeline& timeline() const { return core_.timeline(); }

  /// The borrowed transport.
  Transport& transport() { return t_; }
  /// The options every collective of this allreducer runs with.
  const call_options& options() const { return core_.options(); }

 private:
  /// The composition checks of one call with element type T and op Op.
  template <class T, class Op>
  static constexpr void check_call() {
    check_composition<Algorithm, Transport, T, Op>();  // the table recurses into levels
  }

  /// The steps of op Op for `types` (a typed call's T only; a list of tensor_refs: all).
  template <class Op, class Types>
  static step_table steps(Op, Types types) {
    return runner::template steps<Op>(types);
  }

  Transport& t_;
  detail::allreducer_shared shared_;  // options, timeline, staging pool: used by both below
  runner runner_;                     // a bucket's collective, for these policies
  detail::allreducer_core core_;      // everything the policies do not change; last, so that
                                      // it is destroyed first, joining its progress thread
};

}  // namespace gradsync
