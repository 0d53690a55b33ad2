// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the fusion tests: a small "model" (a list of tensor sizes), exact
// inputs per tensor, and a digest of every tensor for cross-rank / cross-run equality.
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

namespace fusion_test {

namespace gs = gradsync;

/// Sizes of a toy model: a few large tensors, many small ones, an empty one.
inline std::vector<std::size_t> model_sizes() {
  std::vector<std::size_t> s;
  for (std::size_t i = 0; i < 40; ++i) s.push_back((i * 37) % 300 + 1);  // biases, norms
  s.push_back(0);
  s.push_back(70001);
  s.push_back(5000);
  s.push_back(1);
  s.push_back(20000);
  return s;
}

/// Global element index where tensor i starts (so every tensor gets different values).
inline std::vector<std::size_t> firsts(const std::vector<std::size_t>& sizes) {
  std::vector<std::size_t> f(sizes.size(), 0);
  for (std::size_t i = 1; i < sizes.size(); ++i) f[i] = f[i - 1] + sizes[i - 1];
  return f;
}

template <class T>
void fill_model(std::vector<std::span<T>>& ts, gs::reduce_op o, std::size_t rank, std::size_t n,
                const std::vector<std::size_t>& first) {
  for (std::size_t i = 0; i < ts.size(); ++i) gs::testing::fill_inputs(ts[i], o, rank, n, first[i]);
}

template <class T>
std::size_t wrong_model(const std::vector<std::span<T>>& ts, gs::reduce_op o, std::size_t n,
                        const std::vector<std::size_t>& first) {
  std::size_t w = 0;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    w += gs::testing::count_wrong(std::span<const T>(ts[i]), o, n, first[i]);
  }
  return w;
}

template <class T>
std::uint64_t digest_model(const std::vector<std::span<T>>& ts) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& t : ts) h = gs::testing::fnv1a64(t.data(), t.size_bytes(), h);
  return h;
}

/// Registers one tensor of T per entry of `sizes` with allreducer `ar` (in `own` for
/// caller-memory fusion, in gradsync's arena for zero-copy), commits the plan for `op`,
/// and returns each tensor's memory.
template <class T, class AR, class Op>
std::vector<std::span<T>> register_model(AR& ar, const std::vector<std::size_t>& sizes,
                                         std::vector<std::vector<T>>& own, Op op) {
  constexpr bool zero_copy = gs::fusion::is_zero_copy_v<typename AR::fusion_type>;
  own.assign(sizes.size(), {});
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if constexpr (zero_copy) {
      ar.template add<T>(sizes[i]);
    } else {
      own[i].resize(sizes[i]);
      ar.add(std::span<T>(own[i]));
    }
  }
  ar.commit(op);
  std::vector<std::span<T>> ts;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if constexpr (zero_copy) {
      ts.push_back(ar.template view<T>(i));
    } else {
      ts.push_back(std::span<T>(own[i]));
    }
  }
  return ts;
}

/// A permutation of 0..n-1 from `seed`.
inline std::vector<std::size_t> shuffled(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> p(n);
  std::iota(p.begin(), p.end(), std::size_t{0});
  std::mt19937_64 g(seed);
  std::shuffle(p.begin(), p.end(), g);
  return p;
}

}  // namespace fusion_test
