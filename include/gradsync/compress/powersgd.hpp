// SPDX-License-Identifier: Apache-2.0
// compress::powersgd<Rank>: a tensor registered as an m x n matrix M (allreducer::add(
// span, name, {m, n})) travels as two thin factors (Vogels et al., PowerSGD, 2019):
//   P = M Q (m x r), allreduce P, orthonormalise P's columns, Q = M^T P (n x r),
//   allreduce Q, M := P Q^T (/ ranks for op::avg).
// Q is kept per matrix across steps (warm start: one power iteration per step) and starts
// from the same seeded values on every rank, and again after a step whose sums were not
// finite. Both allreduces are sums over the
// composition's algorithm, and every rank decodes the same P and Q, so the results are the
// same bits everywhere. Tensors without a shape, vectors, and matrices too small to gain
// ((m + n) r >= m n / 2) go uncompressed in one allreduce per bucket. Wire bytes per
// matrix and ring pass: 4 r (m + n) against 4 m n.
// What it costs: only a rank-r approximation of the sum arrives; wrap it in error_feedback
// (the residual here is M - P Q_mine^T, what this rank's own factor did not carry).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gradsync/compress/concept.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/kernels/finite.hpp"
#include "gradsync/kernels/lowrank.hpp"

namespace gradsync::compress {

template <std::size_t Rank = 4>  ///< columns of the factors P and Q
struct powersgd {
  static_assert(Rank >= 1 && Rank <= 64,
                "gradsync::compress::powersgd<Rank>: Rank must be in 1..64");
  static constexpr std::string_view name = "powersgd";
  /// float and double are compressed; other types travel as they are.
  template <class T>
  static constexpr bool compresses = std::is_same_v<T, float> || std::is_same_v<T, double>;

  /// True when a rows x cols matrix gains from rank Rank factors. Checked products: a
  /// shape whose size wraps size_t is no matrix in memory and never gains (rows + cols
  /// cannot wrap once rows * cols did not, both being > 1).
  static constexpr bool worth(std::size_t rows, std::size_t cols) {
    std::size_t elements = 0, factors = 0;
    return rows > Rank && cols > Rank && !__builtin_mul_overflow(rows, cols, &elements) &&
           !__builtin_mul_overflow(2 * Rank, rows + cols, &factors) && factors < elements;
  }

  template <class T, class Op>
  struct codec {
    static_assert(Op::id == reduce_op::sum || Op::id == reduce_op::avg,
                  "gradsync::compress::powersgd approximates sums: use it with op::sum or "
                  "op::avg (for min, max or prod use compress::none)");
    using runs_itself = void;
    struct state {
      std::vector<std::vector<T>> qt;  // per tensor of the bucket: Q^T (Rank x cols)
    };

    template <class Ch>
    static void run(Ch& ch, std::span<T> x, state& st, T* residual) {
      body(ch, x, st, residual, false);
    }
    /// error_feedback's entry: `carried` is added into x by the first product's pass.
    template <class Ch>
    static void run_carried(Ch& ch, std::span<T> x, state& st, T* carried) {
      body(ch, x, st, carried, true);
    }

   private:
    template <class Ch>
    static void body(Ch& ch, std::span<T> x, state& st, T* residual, bool carried) {
      constexpr std::size_t r = Rank;
      const std::span<const tensor_part> given = ch.tensors();
      const tensor_part whole{0, x.size(), 0, 0};
      const std::span<const tensor_part> parts =
          given.empty() ? std::span<const tensor_part>(&whole, 1) : given;
      if (st.qt.size() != parts.size()) st.qt.assign(parts.size(), {});
      std::size_t dense = 0, ps = 0, qs = 0;
      for (const auto& p : parts) {
        if (worth(p.rows, p.cols)) {
          ps += r * p.rows;
          qs += r * p.cols;
        } else {
          dense += p.count;
        }
      }
      const std::span<std::byte> buf =
          ch.scratch((dense + ps + qs + (residual ? qs : 0)) * sizeof(T));
      T* d = reinterpret_cast<T*>(buf.data());
      T* pall = d + dense;
      T* qall = pall + ps;
      T* qmine = residual ? qall + qs : nullptr;
      // The uncompressed tensors, packed into one allreduce (exact: no residual).
      ch.timed("compress", [&] {
        std::size_t at = 0;
        for (const auto& p : parts) {
          if (worth(p.rows, p.cols)) continue;
          T* v = x.data() + p.offset;
          if (carried) {
            for (std::size_t i = 0; i < p.count; ++i) v[i] += residual[p.offset + i];
          }
          std::copy(v, v + p.count, d + at);
          if (residual) std::fill(residual + p.offset, residual + p.offset + p.count, T(0));
          at += p.count;
        }
      });
      if (dense) ch.allreduce(std::span<T>(d, dense), Op{});
      // P = M Q for every matrix (Q warm from the last step, or seeded).
      ch.timed("compress", [&] {
        std::size_t po = 0;
        for (std::size_t t = 0; t < parts.size(); ++t) {
          const auto& p = parts[t];
          if (!worth(p.rows, p.cols)) continue;
          auto& q = st.qt[t];
          if (q.size() != r * p.cols) {
            q.resize(r * p.cols);
            kernels::seeded_uniform(q.data(), q.size(), t + 1);
          }
          kernels::lowrank_mq<r>(pall + po, x.data() + p.offset,
                                 carried ? residual + p.offset : nullptr, q.data(), p.rows, p.cols);
          po += r * p.rows;
        }
      });
      if (ps) ch.allreduce(std::span<T>(pall, ps), op::sum);
      // Orthonormal P, then Q = M^T P.
      ch.timed("compress", [&] {
        std::size_t po = 0, qo = 0;
        for (const auto& p : parts) {
          if (!worth(p.rows, p.cols)) continue;
          kernels::orthonormalise(pall + po, p.rows, r);
          kernels::lowrank_mtp<r>(qall + qo, x.data() + p.offset, pall + po, p.rows, p.cols);
          po += r * p.rows;
          qo += r * p.cols;
        }
        if (qmine) std::copy(qall, qall + qs, qmine);
      });
      if (qs) ch.allreduce(std::span<T>(qall, qs), op::sum);
      ch.timed("decompress", [&] {
        const T scale = Op::id == reduce_op::avg ? T(1) / static_cast<T>(ch.ranks()) : T(1);
        std::size_t at = 0, po = 0, qo = 0;
        for (std::size_t t = 0; t < parts.size(); ++t) {
          const auto& p = parts[t];
          if (!worth(p.rows, p.cols)) {
            std::copy(d + at, d + at + p.count, x.data() + p.offset);
            at += p.count;
            continue;
          }
          kernels::lowrank_pqt<r>(x.data() + p.offset, residual ? residual + p.offset : nullptr,
                                  pall + po, qall + qo, qmine ? qmine + qo : nullptr, p.rows,
                                  p.cols, scale);
          if (kernels::first_non_finite(pall + po, r * p.rows) == r * p.rows &&
              kernels::first_non_finite(qall + qo, r * p.cols) == r * p.cols) {
            std::copy(qall + qo, qall + qo + r * p.cols, st.qt[t].begin());  // warm start
          } else {
            // Some rank's M held a NaN or Inf: the result is non-finite on every rank, and
            // a warm start or residual from it would be for good. Every rank sees the same
            // sums, so all restart this matrix alike: Q seeded again, residual zero.
            st.qt[t].clear();
            if (residual) std::fill(residual + p.offset, residual + p.offset + p.count, T(0));
          }
          po += r * p.rows;
          qo += r * p.cols;
        }
      });
    }
  };
};

}  // namespace gradsync::compress
