// SPDX-License-Identifier: Apache-2.0
// The collective of one allreducer bucket, by element type: the bucket's wire, the
// composition's algorithm on the transport (allreducer/bucket_wire.hpp), or, for a type
// the compression policy codes, its codec moving the bucket through a channel
// (allreducer/codec_channel.hpp, compress/concept.hpp). One step per element type,
// chosen at run time from a table that holds only the types the allreducer was built for;
// where the algorithm runs on bytes, the table holds the type and op erased, once, and
// every type shares one step. The rest of the allreducer sees it as a bucket_runner_base.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "gradsync/algo/composition.hpp"
#include "gradsync/algo/tuning.hpp"
#include "gradsync/allreducer/bucket_step.hpp"
#include "gradsync/allreducer/bucket_wire.hpp"
#include "gradsync/allreducer/codec_channel.hpp"
#include "gradsync/allreducer/staging_pool.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/compress/none.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/detail/host_allreduce.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"

namespace gradsync::detail {

/// One bucket's collective for a composition of policies.
template <class Transport,    ///< the allreducer's transport (or levels of them)
          class Algorithm,    ///< its algorithm
          class Compression>  ///< its compression policy
class bucket_runner final : public bucket_runner_base {
  using frame = frame_for<Transport>;  // the frame of a step's checks (one or two levels)

 public:
  /// Over `t`, with the allreducer's shared state (it must outlive the runner).
  bucket_runner(Transport& t, allreducer_shared& s)
      : bucket_runner_base(s.options, s.timeline, !std::is_same_v<Compression, compress::none>),
        t_(t),
        pool_(s.pool),
        wire_(t, opt_, tl_) {}

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
  using wire = bucket_wire<Transport, Algorithm>;

  template <class T, class Op>
  static constexpr step_entry pick() {
    if constexpr (Op::id == reduce_op::avg && !is_floating_element_v<T>) {
      return {};
    } else if constexpr (wire::on_bytes && !compress::compresses_v<Compression, T>) {
      check_composition<Algorithm, Transport, T, Op>();
      return {&bucket_runner::step_bytes, &wire::template ops_of<T, Op>()};
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
  /// `ops` is the wire's ops_of<T, Op>() its table entry holds.
  static void step_bytes(bucket_runner_base& self, const void* ops, void* data, std::size_t count,
                         std::shared_ptr<void>*, std::span<const compress::tensor_part>,
                         observe::track tr, observe::call_stats& acc) {
    using ops_t = typename wire::template ops_type<>;
    static_cast<bucket_runner&>(self).wire_.run_bytes(*static_cast<const ops_t*>(ops), data, count,
                                                      tr, acc);
  }

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
      wire_.template run<T, Op>(static_cast<T*>(data), count, tr, acc);
    } else {
      static_assert(compress::codec_for<Compression, T, Op>,
                    "gradsync: a compression policy defines codec<T, Op> for each type it "
                    "compresses: encode / decode with wire_type and wire_op, or run(channel, "
                    "x, state, residual) (see compress/concept.hpp, compress/cast.hpp and "
                    "compress/int8.hpp)");
      using codec = typename Compression::template codec<T, Op>;
      using state = compress::state_of<codec>;
      using channel = codec_channel<Transport, Algorithm>;
      static_assert(compress::channel<channel>);
      channel ch(wire_, pool_, parts, tr, acc);
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

  Transport& t_;
  staging_pool& pool_;
  const wire wire_;  // the bucket's collective, with this runner's options and timeline
};

}  // namespace gradsync::detail
