// SPDX-License-Identifier: Apache-2.0
// The collective of one allreducer bucket, by element type: the composition's algorithm
// on the transport (traced where it is generic, so its messages are counted and on the
// timeline; over a group with levels each level), or, for a type the compression policy codes,
// its codec moving the bucket through a channel (compress/concept.hpp). One step per
// element type, chosen at run time from a table that holds only the types the allreducer
// was built for; where the algorithm runs on bytes, the table holds the type and op
// erased, once, and every type shares one step. The rest of the allreducer sees it as a
// bucket_runner_base.
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
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "gradsync/algo/composition.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/allgather.hpp"
#include "gradsync/allreducer/bucket_step.hpp"
#include "gradsync/allreducer/staging_pool.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/compress/none.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/detail/host_allreduce.hpp"
#include "gradsync/fusion/arena.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"
#include "gradsync/observe/traced_transport.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync::detail {

/// What a bucket's messages go through over the flat transport Tr with algorithm A: a
/// traced_transport where A is generic (its messages counted and on the timeline), else Tr.
template <class A, class Tr, bool = observe::traces_steps_v<A, Tr>>
struct bucket_wire {
  using type = Tr;
};
template <class A, class Tr>
struct bucket_wire<A, Tr, true> {
  using type = observe::traced_transport<Tr>;
};

/// One bucket's collective for a composition of policies.
template <class Transport,    ///< the allreducer's transport (or levels of them)
          class Algorithm,    ///< its algorithm
          class Compression>  ///< its compression policy
class bucket_runner final : public bucket_runner_base {
  using steady = std::chrono::steady_clock;
  using frame = frame_for<Transport>;  // the frame of a step's checks (one or two levels)

 public:
  /// Over `t`, with the allreducer's shared state (it must outlive the runner).
  bucket_runner(Transport& t, allreducer_shared& s)
      : bucket_runner_base(s.options, s.timeline, !std::is_same_v<Compression, compress::none>),
        t_(t),
        pool_(s.pool) {}

  void share_finding(const finite_finding& mine, std::size_t tensors,
                     function_ref<std::string(std::size_t)> name) override {
    frame::share_finding(t_, mine, opt_.make_deadline(), name, nothing_reduced, tensors);
  }

  void agree_step(std::uint64_t step, std::string_view plan, reduce_op op, bool finite) override {
    if (!header_check_) return;
    call_options o = opt_;
    o.check = true;
    const call_note note{"allreducer step", plan, dtype::f32, op, step, opt_.label};
    const std::uint16_t flags =
        call_header::step_of_plan | (finite ? call_header::finite_checked : 0);
    const frame f(t_, o, note, {"allreducer step inside the node", "allreducer step across nodes"});
    f.run([&] { f.agree(plan, flags); });
  }

  std::string describe_self() const override { return gradsync::describe_self(t_); }

  /// The steps for op Op and the listed element types (a type op::avg cannot take stays
  /// null).
  template <class Op, class... Ts>
  static step_table steps(element_types<Ts...>) {
    static_assert((!std::is_same_v<Ts, std::int8_t> && ...),
                  "gradsync::allreducer does not reduce int8_t (it is compress::int8's wire "
                  "type); leave it out of element_types, the free gradsync::allreduce takes it");
    step_table r{};
    ((r[static_cast<std::size_t>(dtype_of<Ts>::value)] = pick<Ts, Op>()), ...);
    return r;
  }

  /// "direct_one_shot x1, direct_two_shot x4" when Algorithm chooses per bucket (it has
  /// choice<Tr>(bytes, n), as algo::auto_select), else empty.
  std::string choices(const fusion::plan& p) const override {
    if constexpr (Algorithm::traits.chooses) {
      const bool net = algo::tuning::crosses_network(t_);
      return count_choices(p, [&](std::size_t bytes) {
        return Algorithm::template choice<Transport>(bytes, t_.size(), net);
      });
    } else {
      (void)p;
      return {};
    }
  }

 private:
  /// Whether a bucket's collective runs on bytes: one flat transport, and an algorithm
  /// with run_bytes on it (algorithm_traits::on_bytes).
  static constexpr bool on_bytes = [] {
    if constexpr (transport_policy<Transport>) {
      return traits_of<Algorithm, Transport>().on_bytes;
    } else {
      return false;
    }
  }();

  /// The element ops a bucket of T reduced with Op runs on (on_bytes only).
  template <class T, class Op>
  static constexpr const auto& ops_of() {
    using wire = typename bucket_wire<Algorithm, Transport>::type;
    return element_ops_v<decltype(std::declval<const wire&>().executor()), T, Op>;
  }

  template <class T, class Op>
  static constexpr step_entry pick() {
    if constexpr (Op::id == reduce_op::avg && !is_floating_element_v<T>) {
      return {};
    } else if constexpr (on_bytes && !compress::compresses_v<Compression, T>) {
      check_composition<Algorithm, Transport, T, Op>();
      return {&bucket_runner::step_bytes, &ops_of<T, Op>()};
    } else {
      return {&bucket_runner::step_of<T, Op>, nullptr};
    }
  }

  template <class T, class Op>
  static void step_of(bucket_runner_base& self, const void*, void* data, std::size_t count,
                      std::shared_ptr<void>* state, std::span<const compress::tensor_part> parts,
                      observe::track tr, observe::call_stats& acc) {
    static_cast<bucket_runner&>(self).template run_typed<T, Op>(data, count, state, parts, tr, acc);
  }

  /// The step of every type a bucket carries uncoded when the algorithm runs on bytes:
  /// `ops` is the ops_of<T, Op>() its table entry holds.
  static void step_bytes(bucket_runner_base& self, const void* ops, void* data, std::size_t count,
                         std::shared_ptr<void>*, std::span<const compress::tensor_part>,
                         observe::track tr, observe::call_stats& acc) {
    using wire = typename bucket_wire<Algorithm, Transport>::type;
    using ops_t = element_ops<decltype(std::declval<const wire&>().executor())>;
    static_cast<bucket_runner&>(self).run_bytes(*static_cast<const ops_t*>(ops), data, count, tr,
                                                acc);
  }

  /// What a codec moves its bucket through (compress/concept.hpp: channel): the
  /// composition's allreduce, the allgather, staging memory and the timeline.
  class channel {
   public:
    channel(bucket_runner& self, std::span<const compress::tensor_part> parts, observe::track tr,
            observe::call_stats& acc)
        : self_(self), parts_(parts), tr_(tr), acc_(acc), owner_(std::this_thread::get_id()) {}
    channel(const channel&) = delete;
    channel& operator=(const channel&) = delete;
    ~channel() {
      for (auto& a : held_) self_.pool_.release(std::move(a));
    }
    std::size_t ranks() const { return self_.t_.size(); }
    std::size_t rank() const { return self_.t_.rank(); }
    /// Across a network, where a helper thread may call the group: on one host the
    /// codec's passes and the transfers compete for the same cores (measured:
    /// docs/reproducibility.md).
    bool overlaps_wire() const {
      return algo::tuning::crosses_network(self_.t_) && transport::helper_thread_ok<Transport>();
    }
    /// The bucket's tensors (shapes only for registered ones).
    std::span<const compress::tensor_part> tensors() const { return parts_; }
    /// From the codec's helper thread (compress/pieces.hpp) the messages go on a track of
    /// their own: on the bucket's, they would overlap the codec's passes.
    template <class W, class WOp>
    void allreduce(std::span<W> s, WOp) {
      const bool helper = std::this_thread::get_id() != owner_;
      self_.template run_wire<W, WOp>(s.data(), s.size(), helper ? observe::track::codec_wire : tr_,
                                      acc_);
    }
    void allgather(std::span<const std::byte> mine, std::span<std::byte> all) {
      const auto t0 = steady::now();
      acc_.bytes_encoded += mine.size();
      acc_.bytes_wire += gradsync::allgather(
          self_.t_,
          std::span<const std::int8_t>(reinterpret_cast<const std::int8_t*>(mine.data()),
                                       mine.size()),
          std::span<std::int8_t>(reinterpret_cast<std::int8_t*>(all.data()), all.size()),
          self_.opt_);
      self_.event("allgather", tr_, t0, steady::now(),
                  [&] { return "\"bytes\":" + std::to_string(mine.size()); });
    }
    std::span<std::byte> scratch(std::size_t bytes) {
      held_.push_back(self_.pool_.acquire(bytes));
      return {held_.back()->data(), bytes};
    }
    template <class F>
    void timed(std::string_view name, F&& f) {
      const auto t0 = steady::now();
      f();
      const auto t1 = steady::now();
      self_.event(name, tr_, t0, t1, [] { return std::string(); });
      acc_.compress_seconds += std::chrono::duration<double>(t1 - t0).count();
    }

   private:
    bucket_runner& self_;
    std::span<const compress::tensor_part> parts_;
    observe::track tr_;
    observe::call_stats& acc_;
    std::thread::id owner_;  // the thread that runs the codec
    std::vector<std::shared_ptr<fusion::arena>> held_;
  };

  /// The collective of one bucket of T; a type the policy compresses goes through its
  /// codec, with the bucket's state when it has a home (`home`: the committed plan's slot
  /// for this bucket; null for grouped calls: fresh state).
  template <class T, class Op>
  void run_typed(void* data, std::size_t count, std::shared_ptr<void>* home,
                 std::span<const compress::tensor_part> parts, observe::track tr,
                 observe::call_stats& acc) {
    if constexpr (!compress::compresses_v<Compression, T>) {
      (void)home;
      (void)parts;
      run_wire<T, Op>(static_cast<T*>(data), count, tr, acc);
    } else {
      static_assert(compress::codec_for<Compression, T, Op>,
                    "gradsync: a compression policy defines codec<T, Op> for each type it "
                    "compresses: encode / decode with wire_type and wire_op, or run(channel, "
                    "x, state, residual) (see compress/concept.hpp, compress/cast.hpp and "
                    "compress/int8.hpp)");
      using codec = typename Compression::template codec<T, Op>;
      using state = compress::state_of<codec>;
      static_assert(compress::channel<channel>);
      channel ch(*this, parts, tr, acc);
      const std::span<T> x(static_cast<T*>(data), count);
      if constexpr (std::is_same_v<state, compress::no_state>) {
        (void)home;  // stateless (the casts, int8): nothing to keep, nothing to allocate
        compress::no_state none;
        compress::run_codec<Compression, T, Op>(ch, x, none, nullptr);
      } else {
        std::shared_ptr<void> fresh;
        std::shared_ptr<void>& slot = home ? *home : fresh;
        if (!slot) slot = std::make_shared<state>();
        compress::run_codec<Compression, T, Op>(ch, x, *static_cast<state*>(slot.get()), nullptr);
      }
    }
  }

  /// The bucket's collective, one call below the public entry point (the composition was
  /// checked here, at compile time, and the span is the allreducer's own).
  template <class T, class Op>
  void run_wire(T* data, std::size_t count, observe::track tr, observe::call_stats& acc) {
    check_composition<Algorithm, Transport, T, Op>();
    if constexpr (on_bytes) {  // a codec's wire type on an algorithm that runs on bytes
      run_bytes(ops_of<T, Op>(), data, count, tr, acc);
    } else {
      std::span<T> s(data, count);
      acc.bytes_encoded += s.size_bytes();
      if constexpr (transport::leveled<Transport>) {
        run_levels<T, Op>(s, tr, acc);
      } else if constexpr (observe::traces_steps_v<Algorithm, Transport>) {
        observe::traced_transport<Transport> tt(t_, &tl_, tr);
        host_allreduce<Algorithm>(tt, s, Op{}, opt_);
        acc.bytes_wire += tt.bytes_sent();
      } else {  // peer memory or the transport's own allreduce: no messages to count
        host_allreduce<Algorithm>(t_, s, Op{}, opt_);
        acc.bytes_wire += ring_wire_bytes(s.size_bytes(), t_.size());
        acc.wire_measured = false;
      }
    }
  }

  /// The bucket's collective on bytes (on_bytes), `ops` its element type and op.
  template <class Ex>
  void run_bytes(const element_ops<Ex>& ops, void* data, std::size_t count, observe::track tr,
                 observe::call_stats& acc) {
    std::byte* const base = static_cast<std::byte*>(data);
    const std::size_t bytes = count * ops.op.elem;
    acc.bytes_encoded += bytes;
    if constexpr (observe::traces_steps_v<Algorithm, Transport>) {
      observe::traced_transport<Transport> tt(t_, &tl_, tr);
      host_allreduce_bytes<Algorithm>(tt, base, count, ops, opt_);
      acc.bytes_wire += tt.bytes_sent();
    } else {  // not generic on Transport, so not traced: the bytes are the ring's model
      host_allreduce_bytes<Algorithm>(t_, base, count, ops, opt_);
      acc.bytes_wire += ring_wire_bytes(bytes, t_.size());
      acc.wire_measured = false;
    }
  }

  /// Over levels: the phases on the timeline, and the bytes each level sends counted
  /// by a traced_transport around it (the node's ring always; the inter-node algorithm
  /// when it is generic, else, for algo::native, the ring model of the shard).
  template <class T, class Op>
  void run_levels(std::span<T> s, observe::track tr, observe::call_stats& acc) {
    using intra_t = typename Transport::intra_type;
    using inter_t = typename Transport::inter_type;
    using inter_algo = typename Algorithm::inter_algorithm;
    auto phase = [&](std::string_view name, steady::time_point b, steady::time_point e) {
      event(name, tr, b, e, [&] { return "\"elements\":" + std::to_string(s.size()); });
    };
    observe::traced_transport<intra_t> in(t_.intra(), &tl_, tr);
    if constexpr (observe::traces_steps_v<inter_algo, inter_t>) {
      observe::traced_transport<inter_t> out(t_.inter(), &tl_, tr);
      Algorithm::run_on(t_, in, out, s, Op{}, opt_, phase);
      acc.bytes_wire += in.bytes_sent() + out.bytes_sent();
    } else {
      Algorithm::run_on(t_, in, t_.inter(), s, Op{}, opt_, phase);
      const std::size_t local = t_.intra().size();
      acc.bytes_wire +=
          in.bytes_sent() + ring_wire_bytes(s.size_bytes() / local, t_.inter().size());
      acc.wire_measured = false;
    }
  }

  /// Bytes a rank sends in a ring allreduce of `bytes` over n ranks, 2(n-1)/n of them: the
  /// model for collectives whose messages gradsync does not see.
  static std::size_t ring_wire_bytes(std::size_t bytes, std::size_t n) {
    return n > 1 ? bytes * 2 * (n - 1) / n : 0;
  }

  Transport& t_;
  staging_pool& pool_;
};

}  // namespace gradsync::detail
