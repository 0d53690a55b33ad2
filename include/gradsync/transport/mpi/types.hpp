// SPDX-License-Identifier: Apache-2.0
// MPI plumbing for transport::mpi: error translation, the element type -> MPI_Datatype
// and op -> MPI_Op mapping, and the per-transport cache of the user-defined ops that
// half and bfloat16 need (MPI has no 16-bit float types). Include only where <mpi.h>
// is available.
#pragma once

#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/half.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/host.hpp"

namespace gradsync::transport::detail {

/// MPI's text for an error code ("MPI_ERR_TRUNCATE: message truncated", ...).
inline std::string mpi_error_text(int rc) {
  char buf[MPI_MAX_ERROR_STRING + 1] = {};
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<std::size_t>(len));
}

/// MPI's error class of a code (MPI_ERR_TRUNCATE, ...).
inline int mpi_error_class(int rc) {
  int cls = rc;
  MPI_Error_class(rc, &cls);
  return cls;
}

/// Throws errc::transport naming the MPI call and MPI's own text when rc is an error.
inline void check_mpi(int rc, const char* what, const error_site& site) {
  if (rc != MPI_SUCCESS) {
    throw error(errc::transport, site, std::string(what) + " failed: " + mpi_error_text(rc));
  }
}

/// True when MPI is initialized and not yet finalized (so MPI calls are allowed).
inline bool mpi_usable() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

/// The MPI name of a thread support level ("MPI_THREAD_SERIALIZED", ...).
inline std::string mpi_thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return "thread level " + std::to_string(level);
}

/// The predefined MPI datatype of T, or MPI_DATATYPE_NULL for half and bfloat16.
template <class T>
MPI_Datatype builtin_mpi_type() {
  if constexpr (std::is_same_v<T, float>) {
    return MPI_FLOAT;
  } else if constexpr (std::is_same_v<T, double>) {
    return MPI_DOUBLE;
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    return MPI_INT32_T;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return MPI_INT64_T;
  } else if constexpr (std::is_same_v<T, std::int8_t>) {
    return MPI_INT8_T;
  } else {
    return MPI_DATATYPE_NULL;
  }
}

/// True for the element types MPI has no predefined type (and so no predefined op) for.
template <class T>
inline constexpr bool needs_user_op_v = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

/// The predefined MPI op for a reduce op; avg is summed, then divided by the caller.
inline MPI_Op builtin_mpi_op(reduce_op o) {
  switch (o) {
    case reduce_op::prod:
      return MPI_PROD;
    case reduce_op::min:
      return MPI_MIN;
    case reduce_op::max:
      return MPI_MAX;
    case reduce_op::sum:
    case reduce_op::avg:
      break;
  }
  return MPI_SUM;
}

/// MPI user function for element type T under Op: inout[i] = combine(inout[i], in[i]).
/// Uses the very functor the other algorithms use, so results match theirs bit for bit.
template <class T, class Op>
void mpi_user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  kernels::reduce_into(static_cast<T*>(inout), static_cast<const T*>(in),
                       static_cast<std::size_t>(*len), Op{});
}

/// The 2-byte datatype and the user-defined ops of one transport, created on first use
/// and freed with the transport (no process-wide state).
class mpi_op_cache {
 public:
  mpi_op_cache() { ops_.fill(MPI_OP_NULL); }
  mpi_op_cache(const mpi_op_cache&) = delete;
  mpi_op_cache& operator=(const mpi_op_cache&) = delete;
  mpi_op_cache(mpi_op_cache&& o) noexcept : mpi_op_cache() { swap(o); }
  mpi_op_cache& operator=(mpi_op_cache&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~mpi_op_cache() { release(); }

  /// The MPI datatype and op an allreduce of T under Op uses on this transport.
  template <class T, class Op>
  std::pair<MPI_Datatype, MPI_Op> get(const error_site& site) {
    if constexpr (!needs_user_op_v<T>) {
      return {builtin_mpi_type<T>(), builtin_mpi_op(Op::id)};
    } else {
      if (two_byte_ == MPI_DATATYPE_NULL) {
        MPI_Datatype t = MPI_DATATYPE_NULL;
        check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &t), "MPI_Type_contiguous", site);
        if (const int rc = MPI_Type_commit(&t); rc != MPI_SUCCESS) {
          MPI_Type_free(&t);
          check_mpi(rc, "MPI_Type_commit", site);
        }
        two_byte_ = t;
      }
      // avg reduces as a sum (the caller divides afterwards), so it shares sum's op.
      constexpr bool avg = Op::id == reduce_op::avg;
      using fn_op = std::conditional_t<avg, op::sum_t, Op>;
      const std::size_t slot =
          (std::is_same_v<T, bfloat16> ? 4u : 0u) + static_cast<std::size_t>(fn_op::id) - 1u;
      if (ops_[slot] == MPI_OP_NULL) {
        check_mpi(MPI_Op_create(&mpi_user_reduce<T, fn_op>, /*commute=*/1, &ops_[slot]),
                  "MPI_Op_create", site);
      }
      return {two_byte_, ops_[slot]};
    }
  }

  /// Number of user-defined ops created so far (for tests).
  std::size_t user_ops() const {
    std::size_t k = 0;
    for (MPI_Op o : ops_) k += o != MPI_OP_NULL;
    return k;
  }

  /// Frees what was created; safe to call twice, and a no-op once MPI is finalized.
  void release() noexcept {
    if (!mpi_usable()) return;
    for (MPI_Op& o : ops_) {
      if (o != MPI_OP_NULL) MPI_Op_free(&o);
      o = MPI_OP_NULL;
    }
    if (two_byte_ != MPI_DATATYPE_NULL) MPI_Type_free(&two_byte_);
    two_byte_ = MPI_DATATYPE_NULL;
  }

 private:
  void swap(mpi_op_cache& o) noexcept {
    std::swap(two_byte_, o.two_byte_);
    std::swap(ops_, o.ops_);
  }

  MPI_Datatype two_byte_ = MPI_DATATYPE_NULL;
  std::array<MPI_Op, 8> ops_{};  // [bf16 ? 4 : 0] + (sum, prod, min, max)
};

}  // namespace gradsync::transport::detail
