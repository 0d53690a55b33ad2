// SPDX-License-Identifier: Apache-2.0
// Feeds compress::topk<10> (float; sum or avg; alone or under error_feedback) the other
// ranks' top-k blocks as its allgather returns them, for one or two steps.
// Must hold: no crash or sanitizer report; a bad index is errc::mismatch naming that
// peer, with the bucket untouched; sound blocks decode to their values added in rank order.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gradsync/compress/error_feedback.hpp>
#include <gradsync/compress/topk.hpp>

#include "fuzz_support.hpp"

namespace gs = gradsync;
namespace fz = gradsync::fuzz;

namespace {

using policy = gs::compress::topk<10>;

// What the last gathered table decodes to: every rank's values added at its indices.
std::vector<float> decoded(const std::vector<std::byte>& table, std::size_t n, std::size_t k,
                           std::size_t count) {
  std::vector<float> x(count, 0.0f);
  const std::size_t block = k * 8;
  for (std::size_t r = 0; r < n; ++r) {
    const std::byte* b = table.data() + r * block;
    for (std::size_t j = 0; j < k; ++j) {
      float v;
      std::uint32_t i;
      std::memcpy(&v, b + j * 4, 4);
      std::memcpy(&i, b + k * 4 + j * 4, 4);
      x[i] += v;
    }
  }
  return x;
}

template <class Codec>
void steps(fz::byte_source& in, bool feedback) {
  fz::fuzz_channel ch;
  ch.in = &in;
  ch.n = in.in_range(2, 8);
  ch.me = in.in_range(0, ch.n - 1);
  const std::size_t count = in.in_range(1, 4096), k = policy::keep(count);
  const bool dense = ch.n * k * 8 >= 2 * count * sizeof(float);
  const std::size_t rounds = in.in_range(1, 2);
  gs::compress::state_of<Codec> st{};
  std::vector<float> x(count);
  for (std::size_t step = 0; step < rounds; ++step) {
    fz::make_gradient(std::span<float>(x), in);
    const std::vector<float> before = x;
    ch.results.clear();
    try {
      Codec::run(ch, std::span<float>(x), st, nullptr);
    } catch (const gs::error& e) {
      fz::require(e.code() == gs::errc::mismatch, "a bad block is errc::mismatch");
      const std::size_t peer = e.site().peer;
      fz::require(peer < ch.n && peer != ch.me, "the error names a peer, never this rank");
      fz::require(std::string(e.what()).find("rank " + std::to_string(peer) + " sent index") !=
                      std::string::npos,
                  "the message names the peer and its index");
      fz::require(std::memcmp(x.data(), before.data(), count * sizeof(float)) == 0,
                  "a refused table leaves the bucket as it was");
      return;
    }
    if (!dense) {
      fz::require(!ch.results.empty(), "a sparse bucket is gathered");
      const std::vector<float> want = decoded(ch.results.back(), ch.n, k, count);
      for (std::size_t i = 0; i < count; ++i) {
        fz::require(fz::same_value(x[i], want[i]), "sound blocks decode to their sum");
      }
    }
    if constexpr (requires { st.residual; }) {
      fz::require(!feedback || fz::all_finite(std::span<const float>(st.residual)),
                  "no NaN or Inf is carried to the next step");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fz::byte_source in(data, size);
  switch (in.take<std::uint8_t>() % 4) {
    case 0:
      steps<policy::codec<float, gs::op::sum_t>>(in, false);
      break;
    case 1:
      steps<policy::codec<float, gs::op::avg_t>>(in, false);
      break;
    case 2:
      steps<gs::compress::error_feedback<policy>::codec<float, gs::op::sum_t>>(in, true);
      break;
    default:
      steps<gs::compress::error_feedback<policy>::codec<float, gs::op::avg_t>>(in, true);
      break;
  }
  return 0;
}
