// SPDX-License-Identifier: Apache-2.0
// The correctness matrix on transport::local: algorithms {ring, tree, halving_doubling,
// auto_select} x element types x ops x ranks 1..8 x counts {0, 1, n-1, n, 1000003,
// 2^20+7}, in place (aligned and at an odd element offset) and out of place (both spans
// at odd offsets). Every case checks, for every rank: the exact expected result (inputs
// from testing/exact_inputs.hpp), bitwise identity with rank 0, untouched guard
// elements around the output, and an untouched input for out-of-place calls.
//
// One test case per (type, op); meson runs one process per type (see meson.build).
// Inputs and expected results for the large counts are computed once per (op, n) and
// reused by every algorithm and mode, which keeps the suite fast.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "watchdog.hpp"

namespace gs = gradsync;

namespace {

constexpr std::size_t max_ranks = 8;
constexpr std::size_t big_a = 1000003, big_b = (std::size_t{1} << 20) + 7;
constexpr std::size_t count_max = big_b;
constexpr unsigned char guard_byte = 0x5a;

enum class mode { in_place_aligned, in_place_odd, out_of_place_odd };

const char* mode_name(mode m) {
  switch (m) {
    case mode::in_place_aligned:
      return "in-place, offset 0";
    case mode::in_place_odd:
      return "in-place, offset 1";
    case mode::out_of_place_odd:
      return "out-of-place, offsets 1";
  }
  return "?";
}

/// Per-(op, n) inputs and expected results, plus per-rank buffers reused by every case.
template <class T>
struct fixture {
  std::vector<std::vector<T>> inputs;  // [rank][i]: rank's contribution
  std::vector<T> expected;             // exact result, from testing::expected_value
  std::vector<std::vector<T>> io, in;  // [rank]: output (or in-place) and input buffers

  fixture() : inputs(max_ranks), io(max_ranks), in(max_ranks) {
    for (std::size_t r = 0; r < max_ranks; ++r) {
      io[r].resize(count_max + 3);
      in[r].resize(count_max + 3);
    }
  }
  void prepare(gs::reduce_op o, std::size_t n, std::size_t upto) {
    expected.resize(upto);
    for (std::size_t i = 0; i < upto; ++i) {
      expected[i] = gs::testing::from_double<T>(gs::testing::expected_value(o, n, i));
    }
    for (std::size_t r = 0; r < n; ++r) {
      inputs[r].resize(upto);
      gs::testing::fill_inputs(std::span<T>(inputs[r]), o, r, n);
    }
  }
};

bool guard_ok(const void* p, std::size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (b[i] != guard_byte) return false;
  }
  return true;
}

template <class T>
std::size_t count_differing(const T* a, const T* b, std::size_t count) {
  if (count == 0 || std::memcmp(a, b, count * sizeof(T)) == 0) return 0;
  std::size_t d = 0;
  for (std::size_t i = 0; i < count; ++i) d += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return d;
}

/// One allreduce on rank t: in place on `io` when `in` is empty, else out of place.
template <class T>
using call_fn = void (*)(gs::transport::local& t, std::span<const T> in, std::span<T> io,
                         const gs::call_options& opt);

template <class A, class Op, class T>
void call(gs::transport::local& t, std::span<const T> in, std::span<T> io,
          const gs::call_options& opt) {
  if (in.data()) {
    gs::allreduce<A>(t, in, io, Op{}, opt);
  } else {
    gs::allreduce<A>(t, io, Op{}, opt);
  }
}

/// Runs one allreduce case on n threads and checks every rank's result.
template <class T>
void run_case(fixture<T>& f, std::size_t n, std::size_t count, mode m, gs::reduce_op id,
              std::string_view algo, call_fn<T> fn) {
  INFO("algorithm " << algo << ", " << n << " ranks, count " << count << ", "
                    << std::string(mode_name(m)));
  const std::size_t off = m == mode::in_place_aligned ? 0 : 1;
  const gs::call_options opt{.timeout = gs::seconds_d{60}};
  try {
    gs::transport::run_local(n, [&](gs::transport::local& t) {
      const std::size_t r = t.rank();
      T* io = f.io[r].data();
      T* in = f.in[r].data();
      std::memset(static_cast<void*>(io), guard_byte, sizeof(T));
      std::memset(static_cast<void*>(io + off + count), guard_byte, 2 * sizeof(T));
      if (count) {
        std::memcpy(m == mode::out_of_place_odd ? in + 1 : io + off, f.inputs[r].data(),
                    count * sizeof(T));
      }
      if (m == mode::out_of_place_odd) {
        fn(t, std::span<const T>(in + 1, count), std::span<T>(io + 1, count), opt);
      } else {
        fn(t, {}, std::span<T>(io + off, count), opt);
      }
    });
  } catch (const std::exception& e) {
    FAIL_CHECK("allreduce threw: " << e.what());
    return;
  }
  const T* first = f.io[0].data() + off;
  if (count <= 2 * max_ranks) {
    CHECK(gs::testing::count_wrong(std::span<const T>(first, count), id, n) == 0);
  } else {
    CHECK(count_differing(first, f.expected.data(), count) == 0);
  }
  for (std::size_t r = 0; r < n; ++r) {
    CAPTURE(r);
    const T* out = f.io[r].data() + off;
    CHECK(count_differing(out, first, count) == 0);  // bitwise identical to rank 0
    if (off) CHECK(guard_ok(f.io[r].data(), sizeof(T)));
    CHECK(guard_ok(out + count, 2 * sizeof(T)));
    if (m == mode::out_of_place_odd) {
      CHECK(count_differing(f.in[r].data() + 1, f.inputs[r].data(), count) == 0);
    }
  }
}

template <class A, class T, class Op>
void run_algorithm(fixture<T>& f, std::size_t n, Op) {
  const std::size_t counts[] = {0, 1, n - 1, n, big_a, big_b};
  const call_fn<T> fn = &call<A, Op, T>;
  for (std::size_t count : counts) {
    const bool big = count > 2 * max_ranks;
    if (!big) run_case<T>(f, n, count, mode::in_place_aligned, Op::id, A::name, fn);
    run_case<T>(f, n, count, mode::in_place_odd, Op::id, A::name, fn);
    run_case<T>(f, n, count, mode::out_of_place_odd, Op::id, A::name, fn);
  }
}

template <class T, class Op>
void run_matrix(Op op, const char* what) {
  fixture<T> f;
  for (std::size_t n = 1; n <= max_ranks; ++n) {
    gs::testbed::watchdog wd(240, std::string(what) + " on " + std::to_string(n) + " ranks");
    f.prepare(Op::id, n, count_max);
    run_algorithm<gs::algo::ring>(f, n, op);
    run_algorithm<gs::algo::tree>(f, n, op);
    run_algorithm<gs::algo::halving_doubling>(f, n, op);
    run_algorithm<gs::algo::auto_select>(f, n, op);
  }
}

}  // namespace

#define GS_MATRIX_CASE(T, TNAME, OP)                    \
  TEST_CASE("matrix " TNAME " " #OP) {                  \
    run_matrix<T>(gs::op::OP, "matrix " TNAME " " #OP); \
  }
#define GS_MATRIX_INT(T, TNAME)  \
  GS_MATRIX_CASE(T, TNAME, sum)  \
  GS_MATRIX_CASE(T, TNAME, prod) \
  GS_MATRIX_CASE(T, TNAME, min)  \
  GS_MATRIX_CASE(T, TNAME, max)
#define GS_MATRIX_FLOAT(T, TNAME) \
  GS_MATRIX_INT(T, TNAME)         \
  GS_MATRIX_CASE(T, TNAME, avg)

GS_MATRIX_FLOAT(float, "float32")
GS_MATRIX_FLOAT(double, "float64")
GS_MATRIX_FLOAT(gs::half, "float16")
GS_MATRIX_FLOAT(gs::bfloat16, "bfloat16")
GS_MATRIX_INT(std::int32_t, "int32")
GS_MATRIX_INT(std::int64_t, "int64")
