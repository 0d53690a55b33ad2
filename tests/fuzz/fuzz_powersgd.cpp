// SPDX-License-Identifier: Apache-2.0
// Feeds compress::powersgd<2> (float, sum or avg, alone or under error_feedback) the sums of
// P, Q and the dense tensors from the fuzz input, over up to 6 small tensors, for 1-3 steps.
// Must hold: no crash or sanitizer report; dense tensors are the allreduce's result; the kept
// Q and (for a finite gradient) the residual hold no NaN or Inf.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <gradsync/compress/error_feedback.hpp>
#include <gradsync/compress/powersgd.hpp>

#include "fuzz_support.hpp"

namespace gs = gradsync;
namespace fz = gradsync::fuzz;

namespace {

constexpr std::size_t rank_r = 2;
using policy = gs::compress::powersgd<rank_r>;

// The bucket's tensors as the allreducer hands them over: consecutive, each either a
// matrix (count = rows x cols) or without a shape. None: the codec sees one unknown part.
std::vector<gs::compress::tensor_part> make_parts(fz::byte_source& in, std::size_t& count) {
  std::vector<gs::compress::tensor_part> parts(in.in_range(0, 6));
  count = parts.empty() ? in.in_range(1, 512) : 0;
  for (auto& p : parts) {
    p.offset = count;
    p.rows = in.in_range(0, 40);
    p.cols = in.in_range(0, 40);
    if (p.rows == 0 || p.cols == 0) {
      p.rows = p.cols = 0;
      p.count = in.in_range(1, 64);
    } else {
      p.count = p.rows * p.cols;
    }
    count += p.count;
  }
  return parts;
}

template <class Codec, class Qt>
void check_after(const fz::fuzz_channel& ch, std::span<const float> x,
                 std::span<const gs::compress::tensor_part> parts, const Qt& qt) {
  const gs::compress::tensor_part whole{0, x.size(), 0, 0};
  if (parts.empty()) parts = {&whole, 1};
  fz::require(qt.size() == parts.size(), "one kept Q per tensor");
  // The uncompressed tensors were packed, in order, into the first allreduce.
  std::size_t at = 0;
  for (std::size_t t = 0; t < parts.size(); ++t) {
    const auto& p = parts[t];
    if (policy::worth(p.rows, p.cols)) {
      fz::require(qt[t].empty() || qt[t].size() == rank_r * p.cols, "Q is rank x cols");
      fz::require(fz::all_finite(std::span<const float>(qt[t])), "the kept Q is finite");
      continue;
    }
    const std::vector<std::byte>& dense = ch.results.front();
    for (std::size_t i = 0; i < p.count; ++i, ++at) {
      float v;
      std::memcpy(&v, dense.data() + at * sizeof(float), sizeof v);
      fz::require(fz::same_value(x[p.offset + i], v), "an uncompressed tensor is its sum");
    }
  }
}

template <class Codec>
void steps(fz::byte_source& in) {
  fz::fuzz_channel ch;
  ch.in = &in;
  ch.n = in.in_range(1, 8);
  ch.me = in.in_range(0, ch.n - 1);
  std::size_t count = 0;
  ch.parts = make_parts(in, count);
  const std::size_t rounds = in.in_range(1, 3);
  gs::compress::state_of<Codec> st{};
  std::vector<float> x(count);
  bool finite = true;  // every step's own gradient so far
  for (std::size_t step = 0; step < rounds; ++step) {
    finite = fz::make_gradient(std::span<float>(x), in) && finite;
    ch.results.clear();
    try {
      Codec::run(ch, std::span<float>(x), st, nullptr);
    } catch (const gs::error&) {
      return;  // an accepted outcome (none is expected: the codec checks nothing it could refuse)
    }
    if constexpr (requires { st.residual; }) {
      check_after<Codec>(ch, x, ch.parts, st.inner.qt);
      // A NaN of this rank's own is seen in the sums, which here are the input's: it is
      // cleared only when they show it (an honest group's sums always do).
      fz::require(!finite || fz::all_finite(std::span<const float>(st.residual)),
                  "no NaN or Inf is carried to the next step");
    } else {
      check_after<Codec>(ch, x, ch.parts, st.qt);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fz::byte_source in(data, size);
  using ef = gs::compress::error_feedback<policy>;
  switch (in.take<std::uint8_t>() % 4) {
    case 0:
      steps<policy::codec<float, gs::op::sum_t>>(in);
      break;
    case 1:
      steps<policy::codec<float, gs::op::avg_t>>(in);
      break;
    case 2:
      steps<ef::codec<float, gs::op::sum_t>>(in);
      break;
    default:
      steps<ef::codec<float, gs::op::avg_t>>(in);
      break;
  }
  return 0;
}
