// SPDX-License-Identifier: Apache-2.0
// The correctness matrix on transport::mpi: every algorithm x element type x op
// (avg for floating types only) x count {0, 1, n-1, n, 1000003, 2^20+7}, in place at
// an odd element offset and out of place (input at offset 0, output at offset 1).
// Results must equal the exact expected values (testing::count_wrong == 0), be
// bitwise identical on every rank (testing::fnv1a64 of the output, allgathered), leave
// the input of the out-of-place call untouched and write nothing outside the output.
//
// Runtime: each large count runs in one job only (2^20+7 with 2 ranks, 1000003 with 3:
// a power of two and not, multi-segment pipelines included); every rank count runs
// every algorithm x type x op at the small counts. GRADSYNC_TEST_FULL=1 runs all.
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <gradsync/algo/list.hpp>
#include <gradsync/algo/runs_on.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/mpi.hpp>

#include "mpi_harness.hpp"

namespace gs = gradsync;

namespace {

// Every algorithm of gradsync's host list that runs on transport::mpi (ring, tree,
// halving_doubling, auto, native). A build against a second MPI (GS_MPI_TRANSPORT_ONLY,
// tests/meson.build) runs ring and native only: tree, halving_doubling and auto make the
// same transport calls as ring, so what differs between MPI libraries is the transport
// (ring) and the library's own reduction (native); the first MPI runs them all.
#if GS_MPI_TRANSPORT_ONLY
using algorithms = gs::algo::algorithm_list<gs::algo::named<gs::algo::ring, "ring">,
                                            gs::algo::named<gs::algo::native, "native">>;
#else
using algorithms = gs::algo::host_algorithms;
#endif
using element_types = std::tuple<float, double, gs::half, gs::bfloat16, std::int32_t, std::int64_t>;

bool full_matrix() {
  const char* e = std::getenv("GRADSYNC_TEST_FULL");
  return e && *e && std::strcmp(e, "0") != 0;
}

// The two large counts run at one rank count each (2^20+7 on 2 ranks, 1000003 on 3, a
// power of two and not), unless GRADSYNC_TEST_FULL is set.
std::vector<std::size_t> counts_for(std::size_t n) {
  std::vector<std::size_t> c{0, 1};
  if (n - 1 > 1) c.push_back(n - 1);
  if (n > 1) c.push_back(n);
  if (n == 3 || full_matrix()) c.push_back(1000003);
  if (n == 2 || full_matrix()) c.push_back((std::size_t{1} << 20) + 7);
  return c;
}

template <class T>
std::uint64_t hash_of(std::span<const T> s) {
  return gs::testing::fnv1a64(s.data(), s.size_bytes());
}

template <class T>
bool bytes_are(const T& v, unsigned char b) {
  unsigned char want[sizeof(T)];
  std::memset(want, b, sizeof want);
  return std::memcmp(&v, want, sizeof(T)) == 0;
}

// One in-place (`in` unused) or out-of-place allreduce with a given algorithm and op: the
// checks below are compiled once per element type, not per algorithm and op.
template <class T>
using call_fn = void (*)(gs::transport::mpi& t, bool in_place, std::span<const T> in,
                         std::span<T> io, const gs::call_options& opt);

template <class A, class Op, class T>
void call(gs::transport::mpi& t, bool in_place, std::span<const T> in, std::span<T> io,
          const gs::call_options& opt) {
  if (in_place) {
    gs::allreduce<A>(t, io, Op{}, opt);
  } else {
    gs::allreduce<A>(t, in, io, Op{}, opt);
  }
}

// Cost per call at ~1M elements is dominated by the checks, so each is done once: the
// in-place result against the exact values (count_wrong), the out-of-place result
// against the in-place one (bitwise, memcmp), the input against a pristine copy, and one
// FNV-1a hash of the result allgathered across ranks.
template <class T>
void check_one(gs::transport::mpi& t, std::size_t count, std::string_view algo, gs::reduce_op o,
               call_fn<T> fn) {
  const std::size_t n = t.size(), r = t.rank();
  const std::string what = std::string(algo) + " " +
                           std::string(gs::dtype_name(gs::dtype_of<T>::value)) + " " +
                           std::string(gs::op_name(o)) + " count " + std::to_string(count);
  const gs::call_options opt{gs::seconds_d{60}, true};
  constexpr unsigned char guard = 0x5a;
  const std::size_t bytes = count * sizeof(T);

  std::vector<T> in(count), pristine(count), inplace(count + 2), out(count + 2);
  std::memset(static_cast<void*>(inplace.data()), guard, inplace.size() * sizeof(T));
  std::memset(static_cast<void*>(out.data()), guard, out.size() * sizeof(T));
  gs::testing::fill_inputs(std::span<T>(in), o, r, n);
  if (count) std::memcpy(static_cast<void*>(pristine.data()), in.data(), bytes);

  // In place, starting at element 1 (an odd element offset).
  const std::span<T> ip(inplace.data() + 1, count);
  if (count) std::memcpy(static_cast<void*>(ip.data()), in.data(), bytes);
  fn(t, true, {}, ip, opt);
  const std::size_t wrong_ip = gs::testing::count_wrong(std::span<const T>(ip), o, n);
  GS_CHECK_MSG(wrong_ip == 0, what + " in place: " + std::to_string(wrong_ip) + " wrong");
  GS_CHECK_MSG(bytes_are(inplace.front(), guard) && bytes_are(inplace.back(), guard),
               what + " in place wrote outside its span");

  // Out of place: input at offset 0, output at offset 1; must equal the in-place result.
  const std::span<T> oo(out.data() + 1, count);
  fn(t, false, std::span<const T>(in), oo, opt);
  if (count && std::memcmp(oo.data(), ip.data(), bytes) != 0) {
    const std::size_t wrong_oo = gs::testing::count_wrong(std::span<const T>(oo), o, n);
    GS_CHECK_MSG(false, what + " out of place differs from in place; " + std::to_string(wrong_oo) +
                            " wrong");
  }
  GS_CHECK_MSG(!count || std::memcmp(in.data(), pristine.data(), bytes) == 0,
               what + " out of place modified its input");
  GS_CHECK_MSG(bytes_are(out.front(), guard) && bytes_are(out.back(), guard),
               what + " out of place wrote outside its span");

  // Bitwise identical on every rank.
  GS_CHECK_MSG(gs::testbed::same_on_all_ranks({hash_of(std::span<const T>(ip))}),
               what + ": ranks hold different bits");
}

// Every op of T (avg for floating types only) at every count, with algorithm A.
template <class T>
void run_counts(std::string_view algo, call_fn<T> sum, call_fn<T> prod, call_fn<T> min,
                call_fn<T> max, call_fn<T> avg) {
  gs::transport::mpi t{MPI_COMM_WORLD};
  for (const std::size_t count : counts_for(t.size())) {
    check_one<T>(t, count, algo, gs::reduce_op::sum, sum);
    check_one<T>(t, count, algo, gs::reduce_op::prod, prod);
    check_one<T>(t, count, algo, gs::reduce_op::min, min);
    check_one<T>(t, count, algo, gs::reduce_op::max, max);
    if (avg) check_one<T>(t, count, algo, gs::reduce_op::avg, avg);
  }
}

template <class A, class T>
void matrix_case() {
  call_fn<T> avg = nullptr;
  if constexpr (gs::is_floating_element_v<T>) avg = &call<A, gs::op::avg_t, T>;
  run_counts<T>(A::name, &call<A, gs::op::sum_t, T>, &call<A, gs::op::prod_t, T>,
                &call<A, gs::op::min_t, T>, &call<A, gs::op::max_t, T>, avg);
}

template <class A, class T>
void register_one() {
  gs::testbed::mpi_registry().push_back({"matrix: " + std::string(A::name) + " " +
                                             std::string(gs::dtype_name(gs::dtype_of<T>::value)),
                                         &matrix_case<A, T>, 300});
}

template <class A, class... Ts>
void register_algo(std::tuple<Ts...>*) {
  (register_one<A, Ts>(), ...);
}

bool register_all() {
  gs::algo::for_each_algorithm<algorithms>([]<class A>(std::string_view) {
    if constexpr (gs::runs_on_v<A, gs::transport::mpi>)
      register_algo<A>(static_cast<element_types*>(nullptr));
  });
  return true;
}

const bool registered = register_all();

}  // namespace
