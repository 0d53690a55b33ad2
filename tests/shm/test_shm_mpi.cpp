// SPDX-License-Identifier: Apache-2.0
// transport::shm bootstrapped from MPI (shm_from_mpi): run by mpirun, every rank joins
// the node-local shm group and runs a reduced correctness matrix; exact results and
// bitwise identity are checked with MPI (hashes gathered to rank 0). Exit 0 = pass.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <gradsync/algo/auto_select.hpp>
#include <gradsync/algo/direct.hpp>
#include <gradsync/algo/ring.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/shm/from_mpi.hpp>

namespace gs = gradsync;

namespace {

struct tally {
  std::uint64_t wrong = 0;
  std::vector<std::uint64_t> hashes;
};

template <class A, class T, class Op>
void one_case(gs::transport::shm& t, tally& out, std::size_t count) {
  std::vector<T> v(count);
  gs::testing::fill_inputs(std::span<T>(v), Op::id, t.rank(), t.size());
  gs::allreduce<A>(t, std::span<T>(v), Op{});
  out.wrong += gs::testing::count_wrong(std::span<const T>(v), Op::id, t.size());
  out.hashes.push_back(gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
}

template <class A>
void cases(gs::transport::shm& t, tally& out) {
  const std::size_t n = t.size();
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, n, std::size_t{9001}, std::size_t{1000003}}) {
    one_case<A, float, gs::op::sum_t>(t, out, count);
    one_case<A, double, gs::op::avg_t>(t, out, count);
    one_case<A, gs::bfloat16, gs::op::max_t>(t, out, count);
    one_case<A, std::int64_t, gs::op::prod_t>(t, out, count);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  int failed = 0;
  tally out;
  try {
    auto t = gs::transport::shm_from_mpi(MPI_COMM_WORLD);
    if (t.size() != static_cast<std::size_t>(world_size) ||
        t.rank() != static_cast<std::size_t>(world_rank)) {
      std::fprintf(stderr,
                   "rank %d: shm group is rank %zu of %zu, expected the whole (one-node) world\n",
                   world_rank, t.rank(), t.size());
      failed = 1;
    }
    cases<gs::algo::direct_one_shot>(t, out);
    cases<gs::algo::direct_two_shot>(t, out);
    cases<gs::algo::ring>(t, out);
    cases<gs::algo::auto_select>(t, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", world_rank, e.what());
    failed = 1;
  }
  if (out.wrong) {
    std::fprintf(stderr, "rank %d: %llu wrong elements\n", world_rank,
                 static_cast<unsigned long long>(out.wrong));
    failed = 1;
  }
  // Bitwise identity: every rank's hashes equal rank 0's.
  std::vector<std::uint64_t> mine = out.hashes, ref = out.hashes;
  unsigned long long count = mine.size(), max_count = 0, min_count = 0;
  MPI_Allreduce(&count, &max_count, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&count, &min_count, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  if (max_count != min_count || max_count == 0) {
    failed = 1;
  } else {
    MPI_Bcast(ref.data(), static_cast<int>(ref.size()), MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (ref != mine) {
      std::fprintf(stderr, "rank %d: results differ bitwise from rank 0's\n", world_rank);
      failed = 1;
    }
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (world_rank == 0) {
    std::printf("shm over MPI bootstrap, %d ranks, %llu cases: %s\n", world_size, max_count,
                any ? "FAILED" : "ok");
  }
  MPI_Finalize();
  return any ? 1 : 0;
}
