// Peer: MPI_Allreduce of the MPI this binary was built against (in place). half and
// bfloat16 have no MPI datatype, so they travel as 16-bit words reduced by a user op
// (what an application on this MPI would have to do); avg is MPI_SUM then a divide.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/mpi_group.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/host.hpp"
#include "gradsync/transport/mpi_types.hpp"
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
