// SPDX-License-Identifier: Apache-2.0
// What each transport::cuda_ipc rank publishes beside its memory handle, and the check that
// every rank agrees: a peer that sized the staging halves differently would address this
// rank's region with its own size, reading and writing in the middle of the wrong half.
// Host code only (no CUDA), so the check is tested on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gradsync/core/error.hpp"

namespace gradsync::transport::detail {

/// Marks a card as cuda_ipc's, of this layout ("gsipc" and a layout number).
inline constexpr std::uint64_t ipc_card_magic = 0x6773697063000001ull;

/// One rank's sizes, all-gathered with its handle when the transport is made.
struct ipc_card {
  std::uint64_t magic = ipc_card_magic;
  std::uint64_t half_bytes = 0;  // each of the two staging halves
  std::uint64_t ranks = 0;       // the group size this rank was made with
};

/// errc::mismatch unless every card is cuda_ipc's and matches rank 0's sizes. Every rank
/// checks the same gathered table in the same order, so all throw the same error, naming
/// the first rank that differs and both values.
inline void check_ipc_cards(std::size_t rank, std::span<const ipc_card> cards) {
  auto fail = [&](std::size_t r, const std::string& what) {
    throw error(errc::mismatch, {rank, r, ~0ull}, "cuda_ipc: rank " + std::to_string(r) + what);
  };
  for (std::size_t r = 0; r < cards.size(); ++r) {
    if (cards[r].magic != ipc_card_magic) {
      fail(r, " sent a handle card with magic " + std::to_string(cards[r].magic) +
                  " (not gradsync's cuda_ipc of this version, or a corrupt bootstrap)");
    }
  }
  const ipc_card& first = cards[0];
  for (std::size_t r = 1; r < cards.size(); ++r) {
    if (cards[r].ranks != first.ranks) {
      fail(r, " was made for a group of " + std::to_string(cards[r].ranks) +
                  " ranks and rank 0 for " + std::to_string(first.ranks));
    }
    if (cards[r].half_bytes != first.half_bytes) {
      fail(r, " has staging halves of " + std::to_string(cards[r].half_bytes) +
                  " bytes and rank 0 of " + std::to_string(first.half_bytes) +
                  "; every rank must pass the same staging_bytes (rounded down to 256)");
    }
  }
}

}  // namespace gradsync::transport::detail
