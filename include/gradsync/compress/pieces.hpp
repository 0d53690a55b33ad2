// SPDX-License-Identifier: Apache-2.0
// A summable codec's bucket in pieces, so that its passes overlap the wire: piece i's
// codes go through the channel's allreduce on a helper thread (core/piece_worker.hpp)
// while this thread encodes the next pieces and decodes those already back. The cut
// (algo::tuning::codec_pieces) depends on the bytes alone, so every rank makes the same
// calls in the same order. Where the channel says overlaps_wire() is false (one host,
// whose "wire" is the same cores' memory copies; MPI below MPI_THREAD_SERIALIZED) the
// same pieces run one after the other on this thread.
#pragma once

#include <cstddef>

#include "gradsync/core/piece_worker.hpp"

namespace gradsync::compress {

/// For each piece i < pieces: encode(i), ch.allreduce(codes(i), op), decode(i). The
/// allreduces run in piece order, each decode after its own piece's allreduce.
template <class Ch, class Codes, class Op, class Encode, class Decode>
void reduce_in_pieces(Ch& ch, std::size_t pieces, Codes&& codes, Op op, Encode&& encode,
                      Decode&& decode) {
  if (pieces < 2 || !ch.overlaps_wire()) {
    for (std::size_t i = 0; i < pieces; ++i) {
      encode(i);
      ch.allreduce(codes(i), op);
      decode(i);
    }
    return;
  }
  gradsync::detail::piece_worker wire([&](std::size_t i) { ch.allreduce(codes(i), op); });
  for (std::size_t i = 0; i < pieces; ++i) {
    encode(i);
    wire.ready(i);
  }
  for (std::size_t i = 0; i < pieces; ++i) {
    wire.wait(i);
    decode(i);
  }
}

}  // namespace gradsync::compress
