// SPDX-License-Identifier: Apache-2.0
// compress::topk<PerMille>: each rank sends only the k = ceil(count * PerMille / 1000)
// values of largest magnitude of a bucket (ties: lower index; kernels/select.hpp), as k
// values and k 32-bit indices. Sparse sums do not add on the wire, so it is not summable:
// the blocks go through an allgather and every rank adds all of them into a zeroed
// bucket in rank order (the same bits on every rank), dividing by the rank count for
// op::avg. Wire bytes per rank: (ranks - 1) * k * (sizeof(T) + 4); where that is not less
// than a ring allreduce of the bucket (small buckets, many ranks), the bucket goes
// uncompressed. op::avg multiplies the values sent by 1 / ranks. What it costs: the other values of
// the step are dropped, so train with error_feedback<topk<...>>, which carries them into the next
// step.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "gradsync/compress/concept.hpp"
#include "gradsync/config.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/select.hpp"

namespace gradsync::compress {

template <std::size_t PerMille = 10>  ///< thousandths of each bucket sent (10: 1 %)
struct topk {
  static_assert(PerMille >= 1 && PerMille < 500,
                "gradsync::compress::topk<PerMille>: PerMille must be in 1..499 (at 500 and "
                "above values and indices outweigh the dense bucket)");
  static constexpr std::string_view name = "topk";
  /// float and double are sparsified; other types travel as they are.
  template <class T>
  static constexpr bool compresses = std::is_same_v<T, float> || std::is_same_v<T, double>;

  /// The values a bucket of `count` elements keeps.
  static constexpr std::size_t keep(std::size_t count) {
    return count == 0 ? 0 : (count * PerMille + 999) / 1000;
  }

  template <class T, class Op>
  struct codec {
    static_assert(Op::id == reduce_op::sum || Op::id == reduce_op::avg,
                  "gradsync::compress::topk sums sparse gradients: use it with op::sum or "
                  "op::avg (for min, max or prod use compress::none)");
    using runs_itself = void;
    using state = kernels::topk_scratch<T>;  // the selection's buffers, reused each step

    template <class Ch>
    static void run(Ch& ch, std::span<T> x, state& st, T* residual) {
      body(ch, x, st, residual, false);
    }
    /// error_feedback's entry: `carried` holds the last step's residual. The selection's
    /// pass adds x into it (carried := x + carried, read and written once), picks from
    /// it, and clears what was sent: what is left is the next residual, with no copy.
    template <class Ch>
    static void run_carried(Ch& ch, std::span<T> x, state& st, T* carried) {
      body(ch, x, st, carried, true);
    }

   private:
    template <class Ch>
    static void body(Ch& ch, std::span<T> x, state& st, T* residual, bool carried) {
      const std::size_t n = ch.ranks(), count = x.size(), k = keep(count);
      if (n * k * (sizeof(T) + 4) >= 2 * count * sizeof(T)) {  // not worth it: dense
        if (carried) {
          for (std::size_t i = 0; i < count; ++i) x[i] += residual[i];
        }
        if (residual) std::memset(residual, 0, count * sizeof(T));
        ch.allreduce(x, Op{});
        return;
      }
      if (count > std::numeric_limits<std::uint32_t>::max()) {
        throw error(errc::invalid_argument, {ch.rank()},
                    "compress::topk indexes a bucket with 32 bits; this one has " +
                        std::to_string(count) + " elements (use smaller fusion buckets)");
      }
      const std::size_t block = k * (sizeof(T) + sizeof(std::uint32_t));
      const std::span<std::byte> buf = ch.scratch((n + 1) * block);
      std::byte* mine = buf.data();
      ch.timed("compress", [&] {
        auto* idx = reinterpret_cast<std::uint32_t*>(mine + k * sizeof(T));
        // The values picked from: x, or the carried residual with x added in.
        T* src = carried ? residual : x.data();
        kernels::topk_indices(idx, src, count, k, st, carried ? x.data() : nullptr);
        // op::avg divides the values sent (as the casts do), so decoding only adds.
        const T scale = Op::id == reduce_op::avg ? T(1) / static_cast<T>(n) : T(1);
        T* val = reinterpret_cast<T*>(mine);
        // NaN and Inf rank above every finite magnitude, so they are sent first; only when
        // every pick is non-finite can more be left behind in the residual.
        bool crowded = true;
        for (std::size_t j = 0; j < k; ++j) {
          val[j] = src[idx[j]] * scale;
          crowded = crowded && !std::isfinite(src[idx[j]]);
        }
        if (residual) {  // what is not sent waits for the next step
          if (!carried) std::memcpy(residual, x.data(), count * sizeof(T));
          for (std::size_t j = 0; j < k; ++j) residual[idx[j]] = T(0);
          if (crowded) {  // a NaN left there would come back every step: drop it
            for (std::size_t i = 0; i < count; ++i) {
              if (!std::isfinite(residual[i])) residual[i] = T(0);
            }
          }
        }
      });
      ch.allgather(std::span<const std::byte>(mine, block), buf.subspan(block, n * block));
      ch.timed("decompress", [&] {
        // Every block is checked before x is touched: an index from a corrupt or mismatched
        // peer must not write past x. All ranks check the same gathered bytes in the same
        // order, so all raise the same error here and none is left waiting.
        for (std::size_t r = 0; r < n; ++r) {
          const auto* idx =
              reinterpret_cast<const std::uint32_t*>(buf.data() + (1 + r) * block + k * sizeof(T));
          const std::size_t j = kernels::topk_first_bad(idx, k, count);
          if (j < k) {
            throw kernels::topk_index_error(ch.rank(), r, j, idx[j], count,
                                            j ? &idx[j - 1] : nullptr);
          }
        }
        std::memset(x.data(), 0, count * sizeof(T));
        for (std::size_t r = 0; r < n; ++r) {
          const std::byte* b = buf.data() + (1 + r) * block;
          const T* val = reinterpret_cast<const T*>(b);
          const auto* idx = reinterpret_cast<const std::uint32_t*>(b + k * sizeof(T));
          for (std::size_t j = 0; j < k; ++j) x[idx[j]] += val[j];
        }
      });
    }
  };
};

}  // namespace gradsync::compress
