// SPDX-License-Identifier: Apache-2.0
// The one exchange written against the bare transport concept, below every algorithm:
// each rank learns one small record from every rank (a Bruck allgather, ceil(log2 n)
// rounds). The call checks (check/) and two_level's layout check at construction use it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradsync/core/deadline.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::detail {

/// Bruck allgather of `per_rank` trivially copyable records per rank, ceil(log2 n)
/// rounds: table[0, per_rank) holds this rank's records on entry; on return block i
/// (table[i * per_rank, (i + 1) * per_rank)) holds rank (r + i) % n's. Every message of
/// it carries `tag`.
template <transport_policy T, class Record>
void bruck_allgather(T& t, std::vector<Record>& table, std::uint32_t tag, deadline d,
                     std::size_t per_rank = 1) {
  const std::size_t n = t.size(), r = t.rank();
  table.resize(n * per_rank);
  std::size_t have = 1;  // blocks
  for (std::size_t dist = 1; dist < n; dist *= 2) {
    const std::size_t cnt = std::min(dist, n - dist);
    const std::size_t to = (r + n - dist) % n, from = (r + dist) % n;
    const std::size_t bytes = cnt * per_rank * sizeof(Record);
    auto rq = t.irecv(from, &table[have * per_rank], bytes, tag);
    auto sq = t.isend(to, &table[0], bytes, tag);
    t.wait(rq, d);
    t.wait(sq, d);
    have += cnt;
  }
}

/// Bruck allgather of one trivially copyable value per rank: out[i] is rank i's.
template <transport_policy T, class Record>
void allgather_pod(T& t, const Record& mine, std::vector<Record>& out, std::uint32_t tag,
                   deadline d) {
  const std::size_t n = t.size(), r = t.rank();
  std::vector<Record> rot(n);  // rot[i] holds rank (r + i) % n
  rot[0] = mine;
  bruck_allgather(t, rot, tag, d);
  out.resize(n);
  for (std::size_t i = 0; i < n; ++i) out[(r + i) % n] = rot[i];
}

/// Bruck allgather of mine.size() records per rank (the same count on every rank):
/// out[i * mine.size() + k] is rank i's mine[k].
template <transport_policy T, class Record>
void allgather_blocks(T& t, const std::vector<Record>& mine, std::vector<Record>& out,
                      std::uint32_t tag, deadline d) {
  const std::size_t n = t.size(), r = t.rank(), k = mine.size();
  std::vector<Record> rot(n * k);  // block i holds rank (r + i) % n's
  std::copy(mine.begin(), mine.end(), rot.begin());
  bruck_allgather(t, rot, tag, d, k);
  out.resize(n * k);
  for (std::size_t i = 0; i < n; ++i) {
    std::copy_n(rot.begin() + static_cast<std::ptrdiff_t>(i * k), k,
                out.begin() + static_cast<std::ptrdiff_t>(((r + i) % n) * k));
  }
}
}  // namespace gradsync::detail
