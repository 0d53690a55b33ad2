// SPDX-License-Identifier: Apache-2.0
// The machinery behind allreducer: a `batch` is one asynchronous operation (a step of
// registered tensors, a grouped call, or one tensor) made of buckets; batch_runner owns
// the registered tensors, their plan and arena, the staging pool, the statistics and
// the timeline, and runs one bucket (pack, compress, allreduce, decompress, unpack) on
// whatever thread calls.
#pragma once

#include <algorithm>
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
#include "gradsync/algo/tuning.hpp"
#include "gradsync/allgather.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/compress/concept.hpp"
#include "gradsync/core/async.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/log.hpp"
#include "gradsync/detail/thread_level.hpp"
#include "gradsync/detail/arena_placement.hpp"
#include "gradsync/fusion/arena.hpp"
#include "gradsync/fusion/bucket.hpp"
#include "gradsync/fusion/concept.hpp"
#include "gradsync/fusion/plan.hpp"
#include "gradsync/fusion/plan_check.hpp"
#include "gradsync/fusion/tensor.hpp"
#include "gradsync/kernels/host.hpp"
#include "gradsync/observe/metrics.hpp"
#include "gradsync/observe/stats.hpp"
#include "gradsync/observe/timeline.hpp"
#include "gradsync/observe/traced_transport.hpp"
#include "gradsync/transport/two_level.hpp"

namespace gradsync::detail {

using steady = std::chrono::steady_clock;

template <class Transport, class Algorithm, class Fusion, class Compression>
class batch_runner {
 protected:
  /// Runs the allreduce of `count` elements at `data`, of the table slot's element type.
  using runner = void (batch_runner::*)(void* data, std::size_t count, std::shared_ptr<void>* state,
                                        std::span<const compress::tensor_part> parts,
                                        observe::track tr, observe::call_stats& acc);
  using runner_table = std::array<runner, 8>;  // indexed by dtype

  /// One asynchronous operation: buckets of a plan over some tensors.
  struct batch {
    const fusion::plan* plan = nullptr;
    fusion::plan own_plan;                     // grouped calls: their own plan
    const std::vector<void*>* ptrs = nullptr;  // tensor i's memory (null: zero-copy)
    std::vector<void*> own_ptrs;
    std::byte* layout = nullptr;             // the flat layout (arena or staging)
    std::shared_ptr<fusion::arena> staging;  // grouped calls: borrowed from the pool
    runner_table runners{};
    std::shared_ptr<completion> done;
    std::atomic<std::size_t> jobs_left{0};
    observe::call_stats stats;
    steady::time_point created = steady::now();
  };

  /// `bucket_bytes`: 0 for the Fusion policy's caps, else this cap (and the policy's rule
  /// for the first bucket, fusion::default_first_bucket).
  batch_runner(Transport& t, const call_options& opt, const std::string& timeline_path,
               std::size_t bucket_bytes, const std::string& metrics_dir,
               const std::string& metrics_job)
      : t_(t),
        opt_(opt),
        tl_(timeline_path, t.rank()),
        metrics_(metrics_dir, metrics_job, t.rank(),
                 "transport=\"" + std::string(Transport::name) + "\",algorithm=\"" +
                     std::string(Algorithm::name) + "\",fusion=\"" + std::string(Fusion::name) +
                     "\",compression=\"" + std::string(Compression::name) + "\""),
        stall_(stall_threshold(opt.timeout.count() < 0 ? default_timeout() : opt.timeout)),
        bucket_bytes_(bucket_bytes ? bucket_bytes : Fusion::bucket_bytes),
        first_bucket_bytes_(bucket_bytes ? fusion::default_first_bucket(bucket_bytes)
                                         : Fusion::first_bucket_bytes) {
    if (bucket_bytes && !fusion::is_fused_v<Fusion>) {
      throw error(errc::invalid_argument, site(),
                  "allreducer_options::bucket_bytes = " + std::to_string(bucket_bytes) +
                      " needs a fusing policy (fusion::bucket<Bytes> or zero_copy<Bytes>); " +
                      std::string(Fusion::name) + " fuses nothing (leave it 0)");
    }
  }

  // ---- registration ----------------------------------------------------------------

  std::size_t register_tensor(const tensor_ref& r, std::string name, matrix_shape shape = {}) {
    if (committed_) {
      throw error(errc::invalid_argument, site(),
                  "add() after commit(): register every tensor before committing the plan");
    }
    if (!fusion::is_zero_copy_v<Fusion> && !r.data && r.count) {
      throw error(
          errc::invalid_argument, site(),
          "tensor #" + std::to_string(descs_.size()) + " has a null pointer and a non-zero count");
    }
    if ((shape.rows || shape.cols) && shape.rows * shape.cols != r.count) {
      throw error(errc::invalid_argument, site(),
                  "tensor #" + std::to_string(descs_.size()) + " has " + std::to_string(r.count) +
                      " elements but its shape is " + std::to_string(shape.rows) + " x " +
                      std::to_string(shape.cols));
    }
    descs_.push_back({r.count, r.type, std::move(name), shape});
    ptrs_.push_back(r.data);
    return descs_.size() - 1;
  }

  template <class Op, class Types>
  void commit_plan(Op, Types) {
    if (committed_) throw error(errc::invalid_argument, site(), "commit() called twice");
    plan_ = fusion::make_plan(descs_, bucket_bytes_, first_bucket_bytes_, Fusion::order,
                              Fusion::storage);
    fusion::check_plan(t_, std::span<const fusion::tensor_desc>(descs_), plan_,
                       opt_.make_deadline());
    const auto table = runners<Op>(Types{});
    for (std::size_t i = 0; i < descs_.size(); ++i) {
      const dtype d = descs_[i].type;
      if (!table[static_cast<std::size_t>(d)]) {
        std::string why;
        if (d == dtype::i8) {
          why = int8_refusal();
        } else if (!Types::holds(d)) {
          why = " and commit() was given element_types without it (add " +
                std::string(dtype_name(d)) + "'s type to the list, or call commit(op))";
        } else {
          why = " and op::" + std::string(op_name(Op::id)) + " needs a floating-point type";
        }
        throw error(errc::invalid_argument, site(),
                    "tensor #" + std::to_string(i) + tensor_label(i) + " is " +
                        std::string(dtype_name(d)) + why);
      }
    }
    const bool need_layout = fusion::is_zero_copy_v<Fusion> ||
                             std::any_of(plan_.buckets.begin(), plan_.buckets.end(),
                                         [](const auto& b) { return b.tensors.size() > 1; });
    if (need_layout) place_arena(t_, arena_, plan_.layout_bytes);
    if constexpr (fusion::is_zero_copy_v<Fusion>) {
      for (std::size_t i = 0; i < descs_.size(); ++i)
        ptrs_[i] = arena_.data() + plan_.tensor_offset[i];
    }
    plan_chosen_ = chosen_algorithms(plan_);             // the same for every step of this plan
    codec_state_.assign(plan_.buckets.size(), nullptr);  // a new plan starts codecs afresh
    bucket_parts_.assign(plan_.buckets.size(), {});
    for (std::size_t b = 0; b < plan_.buckets.size(); ++b) {
      const auto& k = plan_.buckets[b];
      for (std::size_t i : k.tensors) {
        const std::size_t es = dtype_size(descs_[i].type);
        bucket_parts_[b].push_back({(plan_.tensor_offset[i] - k.offset) / es, descs_[i].count,
                                    descs_[i].shape.rows, descs_[i].shape.cols});
      }
    }
    committed_ = true;
    log(log_level::info, t_.rank(), "bucket plan (%s, op %s): %s",
        std::string(Fusion::name).c_str(), std::string(op_name(Op::id)).c_str(),
        plan_.describe().c_str());
    if (log_enabled(log_level::debug)) {
      for (std::size_t b = 0; b < plan_.buckets.size(); ++b) {
        const auto& k = plan_.buckets[b];
        std::string ts;
        for (std::size_t i : k.tensors) {
          ts += ' ';
          ts += std::to_string(i);  // (not " " + to_string: g++ 12 -O3 -Wrestrict false positive)
        }
        log(log_level::debug, t_.rank(), "bucket %zu: %s, %zu bytes at offset %zu, tensors%s", b,
            std::string(dtype_name(k.type)).c_str(), k.bytes(), k.offset, ts.c_str());
      }
    }
  }

  template <class T>
  std::span<T> arena_view(std::size_t i) {
    static_assert(fusion::is_zero_copy_v<Fusion> && is_element_type_v<T>,
                  "gradsync::allreducer::view<T>(i) needs fusion::zero_copy<Bytes>");
    check_index(i);
    require_committed();
    if (descs_[i].type != dtype_of<T>::value) {
      throw error(errc::invalid_argument, site(),
                  "view<T>(" + std::to_string(i) + "): tensor is " +
                      std::string(dtype_name(descs_[i].type)) + ", not " +
                      std::string(dtype_name(dtype_of<T>::value)));
    }
    return arena_.view<T>(plan_.tensor_offset[i], descs_[i].count);
  }

  void check_index(std::size_t i) const {
    require_committed();
    if (i >= descs_.size()) {
      throw error(errc::invalid_argument, site(),
                  "tensor index " + std::to_string(i) + " out of range (" +
                      std::to_string(descs_.size()) + " registered)");
    }
  }
  void require_committed() const {
    if (!committed_) {
      throw error(errc::invalid_argument, site(),
                  "register tensors with add() and call commit() before ready()/view()/wait()");
    }
  }
  std::string tensor_label(std::size_t i) const {
    return descs_[i].name.empty() ? std::string() : " ('" + descs_[i].name + "')";
  }

  // ---- batches --------------------------------------------------------------------------

  /// The element types an allreducer instantiates unless commit() is given a list. No
  /// int8: int8_t is compress::int8's wire type, and a slot would instantiate every
  /// algorithm for it in every allreducer.
  using all_types = element_types<float, double, half, bfloat16, std::int32_t, std::int64_t>;

  template <class Op, class... Ts>
  static runner_table runners(element_types<Ts...>) {
    static_assert((!std::is_same_v<Ts, std::int8_t> && ...),
                  "gradsync::allreducer does not reduce int8_t (it is compress::int8's wire "
                  "type); leave it out of element_types, the free gradsync::allreduce takes it");
    runner_table r{};
    ((r[static_cast<std::size_t>(dtype_of<Ts>::value)] = pick<Ts, Op>()), ...);
    return r;
  }

  static std::string int8_refusal() {
    return ": the allreducer does not reduce int8 tensors (int8_t is compress::int8's wire "
           "type; the free gradsync::allreduce takes them)";
  }

  std::shared_ptr<batch> make_step_batch(const runner_table& table) {
    auto b = std::make_shared<batch>();
    b->plan = &plan_;
    b->ptrs = &ptrs_;
    b->layout = arena_.data();
    b->runners = table;
    init_batch(*b, &plan_chosen_);
    return b;
  }

  std::shared_ptr<batch> make_list_batch(std::span<const tensor_ref> list,
                                         const runner_table& table) {
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
                             ? int8_refusal()
                             : ", which the op cannot take (op::avg needs a floating-point type)"));
      }
      descs[i] = {list[i].count, list[i].type, {}};
      b->own_ptrs[i] = list[i].data;
    }
    // Grouped calls keep the caller's order: there is no backward pass to follow.
    b->own_plan =
        fusion::make_plan(descs, bucket_bytes_, first_bucket_bytes_, fusion::order::registration);
    b->plan = &b->own_plan;
    b->ptrs = &b->own_ptrs;
    if (std::any_of(b->own_plan.buckets.begin(), b->own_plan.buckets.end(),
                    [](const auto& k) { return k.tensors.size() > 1; })) {
      b->staging = acquire_staging(b->own_plan.layout_bytes);
      b->layout = b->staging->data();
    }
    b->runners = table;
    init_batch(*b);
    return b;
  }

  /// `chosen`: the plan's per-bucket algorithm summary when already known (the
  /// registered plan's, computed once at commit), else computed here.
  void init_batch(batch& b, const std::string* chosen = nullptr) {
    const std::size_t nb = b.plan->buckets.size();
    b.done = std::make_shared<completion>(nb);
    b.jobs_left = nb;
    b.stats.ranks = t_.size();
    b.stats.algorithm = Algorithm::name;
    b.stats.chosen = chosen ? *chosen : chosen_algorithms(*b.plan);
    b.stats.fusion = Fusion::name;
    b.stats.compression = Compression::name;
    b.stats.buckets = nb;
    b.stats.tensors = b.plan->tensor_bucket.size();
    b.stats.bytes_in = b.plan->payload_bytes;
    b.stats.per_bucket.assign(nb, {});
  }
  void finish_empty(batch& b) { fold_stats(std::move(b.stats)); }

  /// "direct_one_shot x1, direct_two_shot x4" when Algorithm chooses per bucket (it has
  /// choice<Tr>(bytes, n), as algo::auto_select), else empty.
  std::string chosen_algorithms(const fusion::plan& p) const {
    if constexpr (requires {
                    Algorithm::template choice<Transport>(std::size_t{}, std::size_t{});
                  }) {
      std::vector<std::pair<std::string_view, std::size_t>> counts;
      for (const auto& k : p.buckets) {
        const std::string_view c = Algorithm::template choice<Transport>(
            k.bytes(), t_.size(), algo::tuning::crosses_network(t_));
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
    } else {
      (void)p;
      return {};
    }
  }

  /// Pack, allreduce and unpack bucket k of `b`; never throws (errors go to b.done).
  void run_bucket(batch& b, std::size_t k, const job_times& jt, observe::track tr) {
    std::exception_ptr err;
    if (!b.done->failed()) {
      try {
        throw_if_broken();
        const auto start = std::max(jt.idle_since, b.created);
        if (start < jt.picked) {
          event("wait_gradients", tr, start, jt.picked,
                [&] { return "\"bucket\":" + std::to_string(k); });
        }
        bucket_body(b, k, tr);
      } catch (...) {
        err = std::current_exception();
        note_failure(err, k);
      }
    }
    if (--b.jobs_left == 0) {
      if (b.staging) release_staging(std::move(b.staging));
      if (!err && !b.done->failed()) fold_stats(std::move(b.stats));
    }
    b.done->finish_one(err);
  }

  std::pair<observe::call_stats, observe::cumulative_stats> stats_snapshot() const {
    std::lock_guard lk(stats_m_);
    return {last_, total_};
  }

  void throw_if_broken() const {
    std::lock_guard lk(stats_m_);
    if (broken_) std::rethrow_exception(broken_);
  }

  error_site site() const { return {t_.rank(), error_site::npos, ~std::uint64_t{0}}; }

  Transport& t_;
  call_options opt_;
  observe::timeline tl_;
  observe::metrics_file metrics_;                  // GRADSYNC_METRICS: written by publish_locked()
  seconds_d stall_;                                // a collective this long is a stall
  std::size_t bucket_bytes_, first_bucket_bytes_;  // the plan's caps
  std::vector<fusion::tensor_desc> descs_;
  std::vector<void*> ptrs_;  // registered tensors' memory (the arena's, in zero-copy mode)
  fusion::plan plan_;
  std::string plan_chosen_;  // chosen_algorithms(plan_), set by commit_plan
  fusion::arena arena_;      // zero-copy home, or staging of the registered packed buckets
  // The codec's state of each bucket of plan_ (error-feedback residuals), made on first
  // use; only the job running bucket k touches slot k.
  std::vector<std::shared_ptr<void>> codec_state_;
  std::vector<std::vector<compress::tensor_part>> bucket_parts_;  // plan_'s buckets' tensors
  bool committed_ = false;

 private:
  /// A timeline event whose arguments (a JSON object body from `args()`) are only built
  /// when the timeline is on.
  template <class Args>
  void event(std::string_view name, observe::track tr, steady::time_point begin,
             steady::time_point end, Args&& args) {
    if (tl_.enabled()) tl_.complete(name, tr, begin, end, args());
  }

  template <class T, class Op>
  static constexpr runner pick() {
    if constexpr (Op::id != reduce_op::avg || is_floating_element_v<T>) {
      return &batch_runner::run_typed<T, Op>;
    } else {
      return nullptr;
    }
  }

  void bucket_body(batch& b, std::size_t k, observe::track tr) {
    const auto& bk = b.plan->buckets[k];
    const bool packed = !fusion::is_zero_copy_v<Fusion> || b.ptrs != &ptrs_;
    std::byte* base = b.layout ? b.layout + bk.offset : nullptr;
    if (packed && bk.tensors.size() == 1) {
      base = static_cast<std::byte*>((*b.ptrs)[bk.tensors[0]]);  // in place, no packing
    } else if (packed && !bk.tensors.empty()) {
      const auto t0 = steady::now();
      for (std::size_t i : bk.tensors) {
        const std::size_t n = b.plan->tensor_bytes[i];
        if (n) std::memcpy(b.layout + b.plan->tensor_offset[i], (*b.ptrs)[i], n);
      }
      const auto t1 = steady::now();
      event("pack", tr, t0, t1, [&] { return "\"bucket\":" + std::to_string(k); });
      b.stats.pack_seconds += std::chrono::duration<double>(t1 - t0).count();
    }
    const auto t0 = steady::now();
    const std::size_t wire0 = b.stats.bytes_wire, encoded0 = b.stats.bytes_encoded;
    const bool registered = b.plan == &plan_;
    std::shared_ptr<void>* state = registered ? &codec_state_[k] : nullptr;
    const auto parts = registered ? std::span<const compress::tensor_part>(bucket_parts_[k])
                                  : std::span<const compress::tensor_part>();
    (this->*b.runners[static_cast<std::size_t>(bk.type)])(base, bk.count, state, parts, tr,
                                                          b.stats);
    const auto t1 = steady::now();
    b.stats.seconds += std::chrono::duration<double>(t1 - t0).count();
    if (t1 - t0 > stall_) ++b.stats.stalls;
    b.stats.per_bucket[k] = {bk.bytes(), b.stats.bytes_encoded - encoded0,
                             b.stats.bytes_wire - wire0};
    event("allreduce", tr, t0, t1, [&] {
      return "\"bucket\":" + std::to_string(k) + ",\"bytes\":" + std::to_string(bk.bytes()) +
             ",\"tensors\":" + std::to_string(bk.tensors.size()) + ",\"algorithm\":\"" +
             std::string(Algorithm::name) + "\"";
    });
    if (packed && bk.tensors.size() > 1) {
      const auto u0 = steady::now();
      for (std::size_t i : bk.tensors) {
        const std::size_t n = b.plan->tensor_bytes[i];
        if (n) std::memcpy((*b.ptrs)[i], b.layout + b.plan->tensor_offset[i], n);
      }
      const auto u1 = steady::now();
      event("unpack", tr, u0, u1, [&] { return "\"bucket\":" + std::to_string(k); });
      b.stats.pack_seconds += std::chrono::duration<double>(u1 - u0).count();
    }
  }

  /// What a codec moves its bucket through (compress/concept.hpp: channel): the
  /// composition's allreduce, the allgather, staging memory and the timeline.
  class channel {
   public:
    channel(batch_runner& self, std::span<const compress::tensor_part> parts, observe::track tr,
            observe::call_stats& acc)
        : self_(self), parts_(parts), tr_(tr), acc_(acc) {}
    channel(const channel&) = delete;
    channel& operator=(const channel&) = delete;
    ~channel() {
      for (auto& a : held_) self_.release_staging(std::move(a));
    }
    std::size_t ranks() const { return self_.t_.size(); }
    std::size_t rank() const { return self_.t_.rank(); }
    /// The bucket's tensors with their shapes (registered plans; empty for grouped calls).
    std::span<const compress::tensor_part> tensors() const { return parts_; }
    template <class W, class WOp>
    void allreduce(std::span<W> s, WOp) {
      self_.template run_wire<W, WOp>(s.data(), s.size(), tr_, acc_);
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
      held_.push_back(self_.acquire_staging(bytes));
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
    batch_runner& self_;
    std::span<const compress::tensor_part> parts_;
    observe::track tr_;
    observe::call_stats& acc_;
    std::vector<std::shared_ptr<fusion::arena>> held_;
  };

  /// The collective of one bucket of T; a type the policy compresses goes through its
  /// codec (compress/concept.hpp), with the bucket's state when it has a home (`home`:
  /// the committed plan's slot for this bucket; null for grouped calls: fresh state).
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

  template <class T, class Op>
  void run_wire(T* data, std::size_t count, observe::track tr, observe::call_stats& acc) {
    std::span<T> s(data, count);
    acc.bytes_encoded += s.size_bytes();
    if constexpr (transport_policy<Transport>) {  // not a two_level: maybe traced
      if constexpr (observe::traces_steps_v<Algorithm, Transport>) {
        observe::traced_transport<Transport> tt(t_, &tl_, tr);
        gradsync::allreduce<Algorithm>(tt, s, Op{}, opt_);
        acc.bytes_wire += tt.bytes_sent();
        return;
      }
    }
    if constexpr (transport::is_two_level_v<Transport>) {
      run_two_level<T, Op>(s, tr, acc);
    } else {  // peer memory or the transport's own allreduce: no messages to count
      gradsync::allreduce<Algorithm>(t_, s, Op{}, opt_);
      acc.bytes_wire += ring_wire_bytes(s.size_bytes(), t_.size());
      acc.wire_measured = false;
    }
  }

  /// Over two levels: the phases on the timeline, and the bytes each level sends counted
  /// by a traced_transport around it (the node's ring always; the inter-node algorithm
  /// when it is generic, else, for algo::native, the ring model of the shard).
  template <class T, class Op>
  void run_two_level(std::span<T> s, observe::track tr, observe::call_stats& acc) {
    using intra_t = typename Transport::intra_type;
    using inter_t = typename Transport::inter_type;
    using inter_algo = typename Algorithm::inter_algorithm;
    check_two_level_composition<Algorithm, intra_t, inter_t, T, Op>();
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

  void note_failure(const std::exception_ptr& e, std::size_t bucket) {
    bool breaks = true;
    std::string what = "unknown exception";
    std::size_t code = 0;  // errors_ index: the errc, 0 for other exceptions
    try {
      std::rethrow_exception(e);
    } catch (const error& x) {
      code = static_cast<std::size_t>(x.code());
      // Refused arguments and diverged results leave the transport in step.
      breaks = x.code() != errc::mismatch && x.code() != errc::invalid_argument &&
               x.code() != errc::diverged;
      what = x.what();
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    log(log_level::warn, t_.rank(), "bucket %zu failed%s: %s", bucket,
        breaks ? " (the allreducer is unusable from now on)" : "", what.c_str());
    {
      std::lock_guard lk(stats_m_);
      ++errors_[code < errors_.size() ? code : 0];
      publish_locked(true);  // a failure is worth a write now
    }
    if (breaks) {
      std::lock_guard lk(stats_m_);
      if (!broken_) broken_ = e;
    }
  }

  // Takes the finished batch's stats: its per-bucket vector becomes last_'s, no copy.
  void fold_stats(observe::call_stats&& s) {
    std::lock_guard lk(stats_m_);
    total_.add(s);
    window_bytes_ += s.bytes_in;
    window_seconds_ += s.seconds;
    last_ = std::move(s);
    publish_locked(false);
  }

 public:
  /// Writes the metrics file now (the allreducer's destructor: the last values).
  void publish_metrics() {
    std::lock_guard lk(stats_m_);
    publish_locked(true);
  }

 private:
  // The Prometheus file from the running totals, when due (or `now`); under stats_m_.
  void publish_locked(bool now) {
    if (!metrics_.enabled() || (!now && !metrics_.due())) return;
    const bool ok = observe::write_allreducer_metrics(metrics_, total_, errors_, t_.size(),
                                                      window_bytes_, window_seconds_);
    window_bytes_ = 0;
    window_seconds_ = 0;
    if (!ok && !metrics_warned_) {
      metrics_warned_ = true;
      log(log_level::warn, t_.rank(), "cannot write metrics file %s", metrics_.path().c_str());
    }
  }

  std::shared_ptr<fusion::arena> acquire_staging(std::size_t bytes) {
    std::lock_guard lk(pool_m_);
    std::shared_ptr<fusion::arena> a;
    auto it = std::find_if(pool_.begin(), pool_.end(), [&](auto& p) { return p->size() >= bytes; });
    if (it == pool_.end() && !pool_.empty()) it = pool_.begin();
    if (it != pool_.end()) {
      a = std::move(*it);
      pool_.erase(it);
    } else {
      a = std::make_shared<fusion::arena>();
    }
    if (a->size() < bytes) place_arena(t_, *a, bytes);
    return a;
  }
  void release_staging(std::shared_ptr<fusion::arena> a) {
    std::lock_guard lk(pool_m_);
    pool_.push_back(std::move(a));
  }

  mutable std::mutex stats_m_;  // guards last_, total_, broken_ and the metrics below
  observe::call_stats last_;
  observe::cumulative_stats total_;
  std::array<std::size_t, 7> errors_{};  // failed buckets by errc (0: other exceptions)
  std::size_t window_bytes_ = 0;         // since the last metrics write
  double window_seconds_ = 0;
  bool metrics_warned_ = false;
  std::exception_ptr broken_;
  std::mutex pool_m_;
  std::vector<std::shared_ptr<fusion::arena>> pool_;
};

}  // namespace gradsync::detail
