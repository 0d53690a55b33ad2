// SPDX-License-Identifier: Apache-2.0
// Peer: MPI_Allreduce of the MPI this binary was built against (in place). half and
// bfloat16 have no MPI datatype, so they travel as 16-bit words reduced by a user op
// (what an application on this MPI would have to do); avg is MPI_SUM then a divide.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/mpi_group.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/host.hpp"
#include "gradsync/transport/mpi/types.hpp"
#include "options.hpp"
#include "sweep.hpp"

namespace gradsync::bench {

/// Makes MPI_Allreduce subjects over `comm` and frees the user ops they needed.
class mpi_peer_maker {
 public:
  mpi_peer_maker(MPI_Comm comm, std::string mpi_name) : comm_(comm), name_(std::move(mpi_name)) {}
  mpi_peer_maker(const mpi_peer_maker&) = delete;
  mpi_peer_maker& operator=(const mpi_peer_maker&) = delete;
  ~mpi_peer_maker() {
    for (MPI_Op& op : user_ops_) MPI_Op_free(&op);
  }

  /// The subject "MPI_Allreduce of T under Op" (Op::id != avg or T floating).
  template <class T, class Op>
  subject<T> make(const options& o) {
    constexpr bool builtin = !transport::detail::needs_user_op_v<T>;
    using reduce_t = std::conditional_t<Op::id == reduce_op::avg, op::sum_t, Op>;
    MPI_Op mop = transport::detail::builtin_mpi_op(o.op);
    if constexpr (!builtin) {
      MPI_Op_create(&transport::detail::mpi_user_reduce<T, reduce_t>, 1, &mop);
      user_ops_.push_back(mop);
    }
    // half and bfloat16 travel as 16-bit words, reduced by the user op.
    const MPI_Datatype mt = builtin ? transport::detail::builtin_mpi_type<T>() : MPI_UINT16_T;
    int size = 1;
    MPI_Comm_size(comm_, &size);
    const std::size_t n = static_cast<std::size_t>(size);
    const MPI_Comm comm = comm_;
    subject<T> s;
    s.label = make_label("peer", "MPI_Allreduce", "-", "native", name_, o);
    s.run = [=](std::span<T> d) {
      MPI_Allreduce(MPI_IN_PLACE, d.data(), static_cast<int>(d.size()), mt, mop, comm);
      if constexpr (Op::id == reduce_op::avg) kernels::finalize(d.data(), d.size(), n, Op{});
    };
    return s;
  }

  /// The subject "p2p_exchange" (kind probe, not an allreduce): every rank sends its
  /// whole vector to the next rank and receives as many bytes from the previous one
  /// (MPI_Sendrecv, in pieces of at most 1 GiB). Each rank's result depends on every
  /// element of the other ranks' vectors, so any allreduce brings each rank at least S
  /// bytes from its peers (a ring at n = 2: S/2 twice, plus reducing S/2); this row is
  /// what moving those bytes alone costs over this MPI's point-to-point path. Not a
  /// strict bound at sizes the caches hold: there its buffers' footprint and warmth
  /// differ from an allreduce's (docs/performance.md, "What both rows pay").
  template <class T>
  subject<T> make_exchange(const options& o) {
    int size = 1, rank = 0;
    MPI_Comm_size(comm_, &size);
    MPI_Comm_rank(comm_, &rank);
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    const MPI_Comm comm = comm_;
    auto in = std::make_shared<std::vector<T>>();
    subject<T> s;
    s.label = make_label("probe", "p2p_exchange", "-", "sendrecv", name_, o);
    s.checked = false;
    s.prepare = [in](std::span<T> d) { in->resize(d.size()); };
    s.run = [=](std::span<T> d) {
      auto* out = reinterpret_cast<const unsigned char*>(d.data());
      auto* back = reinterpret_cast<unsigned char*>(in->data());
      constexpr std::size_t piece = std::size_t{1} << 30;
      for (std::size_t off = 0; off < d.size_bytes(); off += piece) {
        const int len = static_cast<int>(std::min(piece, d.size_bytes() - off));
        MPI_Sendrecv(out + off, len, MPI_BYTE, right, 0, back + off, len, MPI_BYTE, left, 0, comm,
                     MPI_STATUS_IGNORE);
      }
    };
    return s;
  }

 private:
  MPI_Comm comm_;
  std::string name_;
  std::vector<MPI_Op> user_ops_;
};

/// Sweeps MPI_Allreduce over the ranks of `g`; returns the number of wrong elements.
inline std::uint64_t run_mpi_peer(mpi_group& g, const options& o, csv_writer& csv,
                                  const std::string& mpi_name) {
  std::uint64_t wrong = 0;
  mpi_peer_maker maker(g.comm(), mpi_name);
  visit_type_op(o, [&]<class T, class Op>() {
    subject<T> s = maker.template make<T, Op>(o);
    wrong += sweep(g, o, s, csv).wrong;
  });
  return wrong;
}

}  // namespace gradsync::bench
