// SPDX-License-Identifier: Apache-2.0
// Feeds compress::int8<> (float, sum or avg, alone or under error_feedback) the agreed
// scales (its allreduce of op::max) and summed codes (op::sum) from the fuzz input.
// Must hold: no crash or sanitizer report; only > 127 ranks is refused; each element is its
// summed code x scale / levels (/ ranks); a finite gradient's residual has no NaN or Inf.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <span>
#include <vector>

#include <gradsync/compress/error_feedback.hpp>
#include <gradsync/compress/int8.hpp>

#include "fuzz_support.hpp"

namespace gs = gradsync;
namespace fz = gradsync::fuzz;

namespace {

using policy = gs::compress::int8<>;
constexpr std::size_t block = 256;

template <class Codec, class Op>
void steps(fz::byte_source& in, bool feedback) {
  fz::fuzz_channel ch;
  ch.in = &in;
  ch.n = in.in_range(1, 130);
  ch.me = in.in_range(0, ch.n - 1);
  const std::size_t count = in.in_range(1, 2048), rounds = in.in_range(1, 2);
  gs::compress::state_of<Codec> st{};
  std::vector<float> x(count);
  bool finite = true;  // every step's own gradient so far
  for (std::size_t step = 0; step < rounds; ++step) {
    finite = fz::make_gradient(std::span<float>(x), in) && finite;
    ch.results.clear();
    try {
      Codec::run(ch, std::span<float>(x), st, nullptr);
    } catch (const gs::error& e) {
      // An agreed scale below this rank's own largest magnitude (the fuzz input's max) is
      // refused before anything is coded; a group int8 cannot sum is refused up front.
      const bool low_scale =
          e.code() == gs::errc::mismatch &&
          std::string_view(e.what()).find("is below this rank's own largest magnitude") !=
              std::string_view::npos;
      fz::require(low_scale || (e.code() == gs::errc::invalid_argument && ch.n > 127),
                  "only a scale below this rank's own or a group int8 cannot sum is refused");
      return;
    }
    fz::require(ch.n <= 127, "a group of more than 127 ranks is refused");
    fz::require(ch.results.size() == 2, "one allreduce of scales, one of codes");
    const std::vector<std::byte>& scales = ch.results[0];
    const std::vector<std::byte>& codes = ch.results[1];
    fz::require(scales.size() == (count + block - 1) / block * 4 && codes.size() == count,
                "a scale per block and a code per element");
    // The documented decode, as the kernel computes it (no fused multiply-add).
    const float den = static_cast<float>(127 / ch.n) *
                      static_cast<float>(Op::id == gs::reduce_op::avg ? ch.n : 1);
    for (std::size_t i = 0; i < count; ++i) {
      float s;
      std::memcpy(&s, scales.data() + i / block * 4, 4);
      const float want =
          static_cast<float>(static_cast<std::int8_t>(codes[i])) * static_cast<float>(s / den);
      fz::require(fz::same_value(x[i], want), "a code decodes on its block's scale");
    }
    if constexpr (requires { st.residual; }) {
      // A NaN of this rank's own shows as an Inf scale, which here is the input's: it is
      // cleared only when the scale says so (an honest group's max always does).
      fz::require(!feedback || !finite || fz::all_finite(std::span<const float>(st.residual)),
                  "no NaN or Inf is carried to the next step");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fz::byte_source in(data, size);
  using ef = gs::compress::error_feedback<policy>;
  switch (in.take<std::uint8_t>() % 4) {
    case 0:
      steps<policy::codec<float, gs::op::sum_t>, gs::op::sum_t>(in, false);
      break;
    case 1:
      steps<policy::codec<float, gs::op::avg_t>, gs::op::avg_t>(in, false);
      break;
    case 2:
      steps<ef::codec<float, gs::op::sum_t>, gs::op::sum_t>(in, true);
      break;
    default:
      steps<ef::codec<float, gs::op::avg_t>, gs::op::avg_t>(in, true);
      break;
  }
  return 0;
}
