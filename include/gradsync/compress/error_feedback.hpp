// SPDX-License-Identifier: Apache-2.0
// compress::error_feedback<C>: what a lossy C drops in one step is added to the next
// step's gradient, so nothing is lost for good, only late (the residual of 1-bit SGD,
// Deep Gradient Compression, PowerSGD). Per bucket it keeps the residual r (zero on a new
// plan): before encoding x += r, and C writes r := x - what this rank's x decodes to
// (a codec with run_carried(ch, x, state, r) does both itself, in fewer passes).
// The residual lives with the allreducer's committed plan (one per bucket); grouped calls
// (allreduce of a tensor list) have no plan to keep it with and start from zero each time.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "gradsync/compress/concept.hpp"

namespace gradsync::compress {

template <class C>  ///< the lossy compression it corrects (int8<>, topk<>, powersgd<>, fp16, bf16)
struct error_feedback {
  static_assert(compression_policy<C>,
                "gradsync::compress::error_feedback<C>: C must be a compression policy "
                "(int8<>, topk<>, powersgd<>, fp16, bf16)");

 private:
  static constexpr std::string_view prefix = "ef_";
  static constexpr auto name_chars = [] {
    std::array<char, prefix.size() + C::name.size()> a{};
    for (std::size_t i = 0; i < prefix.size(); ++i) a[i] = prefix[i];
    for (std::size_t i = 0; i < C::name.size(); ++i) a[prefix.size() + i] = C::name[i];
    return a;
  }();

 public:
  /// "ef_" and C's name, e.g. "ef_topk".
  static constexpr std::string_view name{name_chars.data(), name_chars.size()};
  using inner = C;
  /// The types C compresses.
  template <class T>
  static constexpr bool compresses = compresses_v<C, T>;

  template <class T, class Op>
  struct codec {
    static_assert(Op::id == reduce_op::sum || Op::id == reduce_op::avg,
                  "gradsync::compress::error_feedback carries residuals of a sum: use op::sum "
                  "or op::avg");
    using runs_itself = void;
    using inner_codec = typename C::template codec<T, Op>;
    struct state {
      std::vector<T> residual;  // carried to the next step
      state_of<inner_codec> inner;
    };

    template <class Ch>
    static void run(Ch& ch, std::span<T> x, state& st, T* outer_residual) {
      if (st.residual.size() != x.size()) st.residual.assign(x.size(), T(0));
      T* r = st.residual.data();
      if constexpr (requires { inner_codec::run_carried(ch, x, st.inner, r); }) {
        inner_codec::run_carried(ch, x, st.inner, r);  // adds r in its own first pass
      } else {
        ch.timed("compress", [&] {
          for (std::size_t i = 0; i < x.size(); ++i) x[i] += r[i];
        });
        run_codec<C, T, Op>(ch, x, st.inner, r);
      }
      if (outer_residual) std::copy(r, r + x.size(), outer_residual);
    }
  };
};

}  // namespace gradsync::compress
