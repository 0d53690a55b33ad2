// SPDX-License-Identifier: Apache-2.0
// bench::group over an MPI communicator (the processes launched by mpirun).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "group.hpp"

namespace gradsync::bench {

/// The ranks of `comm`; the communicator must outlive this object.
class mpi_group final : public group {
 public:
  explicit mpi_group(MPI_Comm comm) : comm_(comm) {
    int r = 0, n = 0;
    MPI_Comm_rank(comm_, &r);
    MPI_Comm_size(comm_, &n);
    rank_ = static_cast<std::size_t>(r);
    size_ = static_cast<std::size_t>(n);
  }
  std::size_t rank() const override { return rank_; }
  std::size_t size() const override { return size_; }
  void barrier() override { MPI_Barrier(comm_); }
  void max_all(std::span<double> v) override {
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, comm_);
  }
  std::uint64_t sum_all(std::uint64_t x) override {
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_UINT64_T, MPI_SUM, comm_);
    return x;
  }
  std::string broadcast(const std::string& s) override {
    unsigned long len = s.size();
    MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG, 0, comm_);
    std::string out = rank_ == 0 ? s : std::string(len, '\0');
    MPI_Bcast(out.data(), static_cast<int>(len), MPI_CHAR, 0, comm_);
    return out;
  }
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_;
  std::size_t rank_ = 0, size_ = 1;
};

}  // namespace gradsync::bench
