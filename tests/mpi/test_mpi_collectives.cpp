// SPDX-License-Identifier: Apache-2.0
// broadcast, allgather and reduce_scatter over transport::mpi and over two_level_from_mpi
// (shm inside "nodes" of consecutive ranks, mpi across): exact results, every root,
// bitwise identity across ranks, below the native threshold (MPI's own collectives) and
// above it (gradsync's); a different root on one rank failing every rank; a native call
// timing out and refusing the next one, the late rank still getting the exact result.
#include <cstddef>
#include <cstdint>
#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/tuning.hpp>
#include <gradsync/allgather.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/detail/native_collectives.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/shm.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

#include "mpi_harness.hpp"

namespace gs = gradsync;
using gs::testbed::world_rank;
using gs::testbed::world_size;

// transport::mpi hands small collectives to MPI; the others keep gradsync's algorithms.
static_assert(gs::detail::has_native_broadcast<gs::transport::mpi> &&
              gs::detail::has_native_allgather<gs::transport::mpi> &&
              gs::detail::has_native_reduce_scatter<gs::transport::mpi, float, gs::op::sum_t>);
static_assert(!gs::detail::has_native_broadcast<gs::transport::shm>);

namespace {

const gs::call_options quick_opts{.timeout = gs::seconds_d{30}};

template <class T>
T value_of(std::size_t who, std::size_t i) {
  return gs::testing::from_double<T>(static_cast<double>((i * 7 + who * 13) % 201) - 100);
}

/// Every collective over `t`: broadcast from every root, reduce_scatter, allgather.
template <class T, class Op, class Tr>
void cases(Tr& t, std::vector<std::uint64_t>& hashes) {
  const std::size_t n = t.size(), r = t.rank();
  std::size_t wrong = 0;
  for (std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{1001}, std::size_t{300007}}) {
    for (std::size_t root = 0; root < n; ++root) {
      std::vector<T> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = value_of<T>(r == root ? root : n + 1, i);
      gs::broadcast(t, std::span<T>(v), root, quick_opts);
      for (std::size_t i = 0; i < count; ++i) {
        const T want = value_of<T>(root, i);
        wrong += std::memcmp(&want, &v[i], sizeof(T)) != 0;
      }
      hashes.push_back(gs::testing::fnv1a64(v.data(), v.size() * sizeof(T)));
    }
    const std::size_t m = count / 4 + (count % 2);
    std::vector<T> in(n * m), out(m);
    gs::testing::fill_inputs(std::span<T>(in), Op::id, r, n);
    gs::reduce_scatter(t, std::span<const T>(in), std::span<T>(out), Op{}, quick_opts);
    wrong += gs::testing::count_wrong(std::span<const T>(out), Op::id, n, r * m);
    std::vector<T> all(n * m);
    gs::allgather(t, std::span<const T>(out), std::span<T>(all), quick_opts);
    wrong += gs::testing::count_wrong(std::span<const T>(all), Op::id, n);
    hashes.push_back(gs::testing::fnv1a64(all.data(), all.size() * sizeof(T)));
  }
  GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong elements");
}

template <class Tr>
void every_type(Tr& t) {
  std::vector<std::uint64_t> hashes;
  cases<float, gs::op::sum_t>(t, hashes);
  cases<gs::bfloat16, gs::op::avg_t>(t, hashes);
  cases<std::int64_t, gs::op::prod_t>(t, hashes);
  GS_CHECK(hashes.size() == 3 * 4 * (t.size() + 1));
  GS_CHECK(gs::testbed::same_on_all_ranks(hashes));
}

}  // namespace

GS_MPI_TEST("collectives: broadcast, reduce_scatter, allgather over mpi, exact", 120) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  every_type(t);
}

GS_MPI_TEST("collectives: above the native threshold, gradsync's algorithms over mpi", 120) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  const std::size_t n = t.size(), r = t.rank();
  // Just past native_collective_bytes for each collective's measure of size.
  const std::size_t big = gs::algo::tuning::native_collective_bytes / sizeof(float) + 3;
  std::vector<float> v(big);
  for (std::size_t i = 0; i < big; ++i) v[i] = value_of<float>(r == 0 ? 0 : n + 1, i);
  gs::broadcast(t, std::span<float>(v), 0, quick_opts);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < big; ++i) wrong += v[i] != value_of<float>(0, i);
  const std::size_t m = big / n + 1;
  std::vector<std::int32_t> in(n * m), out(m), all(n * m);
  gs::testing::fill_inputs(std::span<std::int32_t>(in), gs::reduce_op::sum, r, n);
  gs::reduce_scatter(t, std::span<const std::int32_t>(in), std::span<std::int32_t>(out),
                     gs::op::sum, quick_opts);
  wrong +=
      gs::testing::count_wrong(std::span<const std::int32_t>(out), gs::reduce_op::sum, n, r * m);
  gs::allgather(t, std::span<const std::int32_t>(out), std::span<std::int32_t>(all), quick_opts);
  wrong += gs::testing::count_wrong(std::span<const std::int32_t>(all), gs::reduce_op::sum, n);
  GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong elements");
}

GS_MPI_TEST("collectives: reduce_scatter in place over mpi, native and ring, exact", 60) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  const std::size_t n = t.size(), r = t.rank();
  for (std::size_t m : {std::size_t{3}, gs::algo::tuning::native_collective_bytes / (4 * n) + 3}) {
    std::vector<std::int32_t> in(n * m);
    gs::testing::fill_inputs(std::span<std::int32_t>(in), gs::reduce_op::sum, r, n);
    const std::span<std::int32_t> out(in.data() + r * m, m);
    gs::reduce_scatter(t, std::span<const std::int32_t>(in), out, gs::op::sum, quick_opts);
    const std::size_t wrong =
        gs::testing::count_wrong(std::span<const std::int32_t>(out), gs::reduce_op::sum, n, r * m);
    GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong elements of " + std::to_string(m));
  }
}

GS_MPI_TEST("collectives: allgather in place over mpi (MPI_IN_PLACE natively), exact", 60) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  const std::size_t n = t.size(), r = t.rank();
  // Below and above the native threshold: MPI's own allgather, then gradsync's ring.
  for (std::size_t m : {std::size_t{3}, gs::algo::tuning::native_collective_bytes / (4 * n) + 3}) {
    std::vector<std::int32_t> all(n * m, -7);
    for (std::size_t i = 0; i < m; ++i) all[r * m + i] = static_cast<std::int32_t>(1000 * r + i);
    gs::allgather(t, std::span<const std::int32_t>(all.data() + r * m, m),
                  std::span<std::int32_t>(all), quick_opts);
    std::size_t wrong = 0;
    for (std::size_t q = 0; q < n; ++q) {
      for (std::size_t i = 0; i < m; ++i) {
        wrong += all[q * m + i] != static_cast<std::int32_t>(1000 * q + i);
      }
    }
    GS_CHECK_MSG(wrong == 0, std::to_string(wrong) + " wrong elements of " + std::to_string(n * m));
  }
}

// Without the argument check the timeout happens inside MPI_Ibcast, which MPI cannot
// cancel: the others keep it pending and refuse further native calls, and the late root
// then joins it. (A late non-root would not do: the others may get the data without it.)
GS_MPI_TIMING_TEST("collectives: a native broadcast times out, then the late root joins", 30) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  if (t.size() < 2) GS_SKIP("needs 2 ranks");
  const std::size_t root = 0;
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value_of<float>(t.rank() == root ? 0 : 9, i);
  const gs::call_options unchecked{.timeout = gs::seconds_d{0.25}, .check = false};
  if (t.rank() != root) {
    const std::string m =
        GS_CHECK_ERROR(gs::broadcast(t, std::span<float>(v), root, unchecked), gs::errc::timeout);
    GS_CHECK_MSG(
        gs::testbed::contains(m, "deadline passed in MPI_Ibcast of 4000 bytes from rank 0"), m);
    std::vector<float> in(t.size()), out(1);
    const std::string m2 =
        GS_CHECK_ERROR(gs::reduce_scatter(t, std::span<const float>(in), std::span<float>(out),
                                          gs::op::sum, unchecked),
                       gs::errc::transport);
    GS_CHECK_MSG(gs::testbed::contains(m2, "create a new transport::mpi"), m2);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    gs::call_options joined = unchecked;
    joined.timeout = gs::seconds_d{30};
    gs::broadcast(t, std::span<float>(v), root, joined);
  }
  // The others' abandoned MPI_Ibcast completes while they wait in the harness; it writes
  // into `v`, so `v` and the transport stay alive until the end of the run.
  gs::testbed::keep_until_exit(std::move(v));
  gs::testbed::keep_until_exit(std::move(t));
}

GS_MPI_TEST("collectives: the same over two levels (shm nodes of 2 ranks, mpi across)", 120) {
  if (world_size() % 2) GS_SKIP("needs an even rank count");
  auto t =
      gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, static_cast<int>(world_rank() / 2));
  GS_CHECK(t.rank() == world_rank());
  every_type(t);
}

GS_MPI_TEST("collectives: a different root on one rank fails every rank", 60) {
  if (world_size() < 2) GS_SKIP("needs 2 ranks");
  gs::transport::mpi t{MPI_COMM_WORLD};
  std::vector<float> v(100, 1.0f);
  const std::size_t odd = world_size() - 1;
  const std::string m =
      GS_CHECK_ERROR(gs::broadcast(t, std::span<float>(v), t.rank() == odd ? 1 : 0, quick_opts),
                     gs::errc::mismatch);
  GS_CHECK_MSG(gs::testbed::contains(m, "ranks called broadcast with different arguments") &&
                   gs::testbed::contains(
                       m, "rank " + std::to_string(odd) + " differs from rank 0 in root 0 vs 1"),
               m);
  // The check kept the ranks in step: the next call works.
  gs::broadcast(t, std::span<float>(v), 0, quick_opts);
}
