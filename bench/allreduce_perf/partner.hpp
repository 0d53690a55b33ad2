// SPDX-License-Identifier: Apache-2.0
// The subject timed interleaved with gradsync's rows (--interleave), behind an interface:
// rows compiled without MPI (the shm rows, built once for every MPI flavour) can then take
// MPI_Allreduce as their partner. One virtual per element type; the op is a run-time value
// the implementation turns back into its tag.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "gradsync/core/dtype.hpp"
#include "gradsync/core/half.hpp"
#include "gradsync/core/op.hpp"
#include "options.hpp"
#include "sweep.hpp"

namespace gradsync::bench {

template <class T>
struct type_tag {};

// The element types visit_dtype dispatches to, once: X(T) for each.
#define GRADSYNC_BENCH_PARTNER_TYPES(X) \
  X(float) X(double) X(half) X(bfloat16) X(std::int32_t) X(std::int64_t)

/// What run_gradsync_rows needs of a partner: make<T, Op>(o) and make_exchange<T>(o).
class partner_source {
 public:
  virtual ~partner_source() = default;
  template <class T, class Op>
  subject<T> make(const options& o) {
    return make_for(type_tag<T>{}, Op::id, o);
  }
  template <class T>
  subject<T> make_exchange(const options& o) {
    return exchange_for(type_tag<T>{}, o);
  }

 protected:
#define GRADSYNC_BENCH_PARTNER_TYPE(T)                                     \
  virtual subject<T> make_for(type_tag<T>, reduce_op, const options&) = 0; \
  virtual subject<T> exchange_for(type_tag<T>, const options&) = 0;
  GRADSYNC_BENCH_PARTNER_TYPES(GRADSYNC_BENCH_PARTNER_TYPE)
#undef GRADSYNC_BENCH_PARTNER_TYPE
};

/// A partner_source over a maker with template make<T, Op>(o) and make_exchange<T>(o)
/// (e.g. mpi_peer_maker); the maker must outlive it.
template <class Maker>
class partner_of final : public partner_source {
 public:
  explicit partner_of(Maker& m) : m_(m) {}

 private:
  template <class T>
  subject<T> make_typed(reduce_op id, const options& o) {
    return visit_op(id, [&](auto opv) -> subject<T> {
      using Op = std::remove_cvref_t<decltype(opv)>;
      if constexpr (Op::id == reduce_op::avg && !is_floating_element_v<T>) {
        throw std::invalid_argument("op avg needs a floating-point type");
      } else {
        return m_.template make<T, Op>(o);
      }
    });
  }
#define GRADSYNC_BENCH_PARTNER_TYPE(T)                                        \
  subject<T> make_for(type_tag<T>, reduce_op id, const options& o) override { \
    return make_typed<T>(id, o);                                              \
  }                                                                           \
  subject<T> exchange_for(type_tag<T>, const options& o) override {           \
    return m_.template make_exchange<T>(o);                                   \
  }
  GRADSYNC_BENCH_PARTNER_TYPES(GRADSYNC_BENCH_PARTNER_TYPE)
#undef GRADSYNC_BENCH_PARTNER_TYPE

  Maker& m_;
};

#undef GRADSYNC_BENCH_PARTNER_TYPES

}  // namespace gradsync::bench
