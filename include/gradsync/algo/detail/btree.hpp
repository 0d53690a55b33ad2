// SPDX-License-Identifier: Apache-2.0
// The two binary trees of algo::tree (NCCL's double binary tree). Tree A is NCCL's
// in-order binary tree over positions 0..n-1 (root 0, odd positions are leaves); tree B
// is tree A mirrored (position p holds rank n-1-p) when n is even, or shifted by one
// (position p holds rank (p+1) % n) when n is odd, so the leaves of A are the interior
// nodes of B: every rank is interior in at most one tree (rank 0 is the exception for
// odd n, where it is A's root with one child and interior in B).
#pragma once

#include <array>
#include <cstddef>

namespace gradsync::algo::detail {

/// One rank's place in one binary tree.
struct tree_node {
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::size_t parent = none;                     ///< parent rank, `none` at the root
  std::array<std::size_t, 2> child{none, none};  ///< children ranks in a fixed order
  std::size_t children = 0;                      ///< how many entries of `child` are set
  std::size_t depth = 0;                         ///< edges from the root
  std::size_t max_depth = 0;                     ///< the tree's height (same on every rank)
};

/// Parent position of `pos` in NCCL's binary tree over `n` positions (ncclGetBtree):
/// clear the lowest set bit and set the next one, or only clear it when that is out
/// of range. The parent's lowest set bit is always higher, so this is a tree rooted at 0.
inline std::size_t btree_parent(std::size_t n, std::size_t pos) {
  if (pos == 0) return tree_node::none;
  std::size_t bit = 1;
  while (!(pos & bit)) bit <<= 1;
  const std::size_t up = (pos ^ bit) | (bit << 1);
  return up < n ? up : (pos ^ bit);
}

inline std::size_t btree_depth(std::size_t n, std::size_t pos) {
  std::size_t d = 0;
  for (; pos != 0; pos = btree_parent(n, pos)) ++d;
  return d;
}

/// Rank at position `pos` of tree `which` (0 = A, 1 = B) and the inverse.
inline std::size_t btree_rank(std::size_t n, int which, std::size_t pos) {
  if (which == 0) return pos;
  return n % 2 == 0 ? n - 1 - pos : (pos + 1) % n;
}
inline std::size_t btree_pos(std::size_t n, int which, std::size_t rank) {
  if (which == 0) return rank;
  return n % 2 == 0 ? n - 1 - rank : (rank + n - 1) % n;
}

/// Rank `rank`'s parent, children (ascending position) and depth in tree `which`.
/// O(n log n); identical on every rank.
inline tree_node btree_node(std::size_t n, int which, std::size_t rank) {
  tree_node t;
  const std::size_t me = btree_pos(n, which, rank);
  const std::size_t up = btree_parent(n, me);
  if (up != tree_node::none) t.parent = btree_rank(n, which, up);
  t.depth = btree_depth(n, me);
  for (std::size_t p = 1; p < n; ++p) {
    const std::size_t d = btree_depth(n, p);
    if (d > t.max_depth) t.max_depth = d;
    if (btree_parent(n, p) == me && t.children < t.child.size()) {
      t.child[t.children++] = btree_rank(n, which, p);
    }
  }
  return t;
}

}  // namespace gradsync::algo::detail
