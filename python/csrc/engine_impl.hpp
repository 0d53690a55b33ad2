// SPDX-License-Identifier: Apache-2.0
// engine_impl<Transport, Algorithm>: the engine interface over one gradsync composition.
// Included by one source file per transport (engine_shm.cpp, engine_mpi.cpp,
// engine_two_level.cpp), so each composition is compiled once, in parallel with the others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "engine.hpp"

namespace gradsync_torch {

namespace detail {
/// Calls f(T{}) for the six element types gradsync reduces; int8 is refused here (it is
/// gradsync's wire type for compress::int8, not a reduction type of the backend).
template <class F>
void visit_reduce_type(gradsync::dtype d, F&& f) {
  using gradsync::dtype;
  switch (d) {
    // clang-format off
    case dtype::f32: return f(float{});
    case dtype::f64: return f(double{});
    case dtype::f16: return f(gradsync::half{});
    case dtype::bf16: return f(gradsync::bfloat16{});
    case dtype::i32: return f(std::int32_t{});
    case dtype::i64: return f(std::int64_t{});
    case dtype::i8: break;
      // clang-format on
  }
  throw gradsync::error(gradsync::errc::invalid_argument, {},
                        "reductions take float32, float64, float16, bfloat16, int32 or int64");
}

/// Integer averages: the sum divided by the rank count, truncated toward zero (C++'s
/// integer division), on every rank alike.
template <class T>
void divide(std::span<T> s, std::size_t n) {
  const T d = static_cast<T>(n);
  for (T& v : s) v /= d;
}
}  // namespace detail

template <class Transport,  ///< a gradsync transport (shm, mpi) or a two_level<shm, mpi>
          class Algorithm>  ///< auto_select on a flat transport, hierarchical<> on a two_level
class engine_impl final : public engine {
 public:
  engine_impl(Transport t, std::string_view name, std::string shape)
      : t_(std::move(t)), name_(name), shape_(std::move(shape)) {}

  std::string_view transport() const override { return name_; }
  std::string describe() const override {
    return std::string(name_) + " (" + shape_ + ", " + std::string(Algorithm::name) + ")";
  }
  std::size_t rank() const override { return t_.rank(); }
  std::size_t size() const override { return t_.size(); }

  void allreduce(void* data, std::size_t count, gradsync::dtype type, gradsync::reduce_op op,
                 const gradsync::call_options& opt) override {
    detail::visit_reduce_type(type, [&](auto tag) {
      using T = decltype(tag);
      const std::span<T> s(static_cast<T*>(data), count);
      if constexpr (!gradsync::is_floating_element_v<T>) {
        if (op == gradsync::reduce_op::avg) {
          gradsync::allreduce<Algorithm>(t_, s, gradsync::op::sum, opt);
          detail::divide(s, t_.size());
          return;
        }
      }
      gradsync::visit_op(op, [&](auto o) {
        if constexpr (gradsync::is_floating_element_v<T> ||
                      decltype(o)::id != gradsync::reduce_op::avg) {
          gradsync::allreduce<Algorithm>(t_, s, o, opt);
        }
      });
    });
  }

  void broadcast(void* data, std::size_t count, gradsync::dtype type, std::size_t root,
                 const gradsync::call_options& opt) override {
    gradsync::visit_dtype(type, [&](auto tag) {
      using T = decltype(tag);
      gradsync::broadcast(t_, std::span<T>(static_cast<T*>(data), count), root, opt);
    });
  }

  void allgather(const void* in, void* out, std::size_t count, gradsync::dtype type,
                 const gradsync::call_options& opt) override {
    gradsync::visit_dtype(type, [&](auto tag) {
      using T = decltype(tag);
      gradsync::allgather(t_, std::span<const T>(static_cast<const T*>(in), count),
                          std::span<T>(static_cast<T*>(out), count * t_.size()), opt);
    });
  }

  void reduce_scatter(const void* in, void* out, std::size_t count, gradsync::dtype type,
                      gradsync::reduce_op op, const gradsync::call_options& opt) override {
    detail::visit_reduce_type(type, [&](auto tag) {
      using T = decltype(tag);
      const std::span<const T> i(static_cast<const T*>(in), count * t_.size());
      const std::span<T> o(static_cast<T*>(out), count);
      if constexpr (!gradsync::is_floating_element_v<T>) {
        if (op == gradsync::reduce_op::avg) {
          gradsync::reduce_scatter(t_, i, o, gradsync::op::sum, opt);
          detail::divide(o, t_.size());
          return;
        }
      }
      gradsync::visit_op(op, [&](auto r) {
        if constexpr (gradsync::is_floating_element_v<T> ||
                      decltype(r)::id != gradsync::reduce_op::avg) {
          gradsync::reduce_scatter(t_, i, o, r, opt);
        }
      });
    });
  }

  void compressed_average(std::size_t bucket, void* data, std::size_t count, gradsync::dtype type,
                          codec c, const std::vector<std::size_t>& tensors,
                          const gradsync::call_options& opt) override {
    if (type != gradsync::dtype::f32) {  // the codecs are built for float32 buckets only
      if (c == codec::exact) {           // averaged plainly, the bits would depend on the buckets
        throw gradsync::error(gradsync::errc::invalid_argument, {t_.rank()},
                              std::string("the exact hook averages float32 buckets; this one "
                                          "holds ") +
                                  std::string(gradsync::dtype_name(type)) +
                                  " (keep such parameters float32, or use DDP's default hook)");
      }
      allreduce(data, count, type, gradsync::reduce_op::avg, opt);
      return;
    }
    std::vector<std::size_t> parts = tensors;
    if (parts.empty()) parts.push_back(count);
    auto& slot = buckets_[bucket];
    if (!slot || slot->kind != c || slot->tensors != parts) {
      slot.reset();  // the old allreducer goes before the new one commits its plan
      if (c == codec::int8) {
        slot = std::make_unique<compressed<ef<gradsync::compress::int8<>>>>(t_, opt, parts, c);
      } else if (c == codec::topk) {
        slot = std::make_unique<compressed<ef<gradsync::compress::topk<10>>>>(t_, opt, parts, c);
      } else {
        // One gradsync bucket for the whole DDP bucket (up to 64 MiB; a larger one splits
        // at a tensor's edge, which changes no bits).
        slot = std::make_unique<compressed<gradsync::compress::exact<>,
                                           gradsync::fusion::bucket<std::size_t{64} << 20>>>(
            t_, opt, parts, c);
      }
    }
    slot->run(static_cast<float*>(data));
  }

  void abort() noexcept override {
    if constexpr (requires { t_.abort(); }) t_.abort();
  }

 private:
  template <class C>
  using ef = gradsync::compress::error_feedback<C>;

  /// One DDP bucket's allreducer: its plan registers this bucket's own copy (one tensor
  /// per entry of `tensors`), so the residual of error_feedback stays with the bucket
  /// across steps.
  struct bucket_state {
    bucket_state(std::vector<std::size_t> t, codec c) : tensors(std::move(t)), kind(c) {}
    virtual ~bucket_state() = default;
    virtual void run(float* data) = 0;
    std::vector<std::size_t> tensors;  // element counts, in the bucket's order
    codec kind;
  };

  template <class C, class Fusion = gradsync::fusion::none>
  struct compressed final : bucket_state {
    compressed(Transport& t, const gradsync::call_options& opt, std::vector<std::size_t> parts,
               codec c)
        : bucket_state(std::move(parts), c), buf(total(this->tensors)), sync(t, options(opt)) {
      std::size_t at = 0;
      for (std::size_t k = 0; k < this->tensors.size(); ++k) {
        const std::size_t n = this->tensors[k];
        sync.add(std::span<float>(buf.data() + at, n), "ddp_bucket." + std::to_string(k));
        at += n;
      }
      sync.commit(gradsync::op::avg, gradsync::element_types<float>{});
    }
    static std::size_t total(const std::vector<std::size_t>& v) {
      std::size_t n = 0;
      for (std::size_t x : v) n += x;
      return n;
    }
    void run(float* data) override {
      std::memcpy(buf.data(), data, buf.size() * sizeof(float));
      sync.wait();  // runs the whole step on this (the worker) thread
      std::memcpy(data, buf.data(), buf.size() * sizeof(float));
    }
    static gradsync::allreducer_options options(const gradsync::call_options& opt) {
      gradsync::allreducer_options o;
      o.call = opt;
      o.background_thread = false;  // the process group's worker already runs it
      o.timeline.clear();           // one file per bucket would clash
      o.metrics.clear();
      return o;
    }
    std::vector<float> buf;
    gradsync::allreducer<Transport, Algorithm, Fusion, C> sync;
  };

  Transport t_;
  std::string_view name_;
  std::string shape_;
  std::map<std::size_t, std::unique_ptr<bucket_state>> buckets_;  // after t_: freed first
};

}  // namespace gradsync_torch
