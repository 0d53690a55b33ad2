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

/// Bruck allgather of one trivially copyable record per rank, ceil(log2 n) rounds:
/// table[0] holds this rank's record on entry; on return table[i] holds rank
/// (r + i) % n's. Every message of it carries `tag`.
template <transport_policy T, class Record>
void bruck_allgather(T& t, std::vector<Record>& table, std::uint32_t tag, deadline d) {
  const std::size_t n = t.size(), r = t.rank();
  table.resize(n);
  std::size_t have = 1;
  for (std::size_t dist = 1; dist < n; dist *= 2) {
    const std::size_t cnt = std::min(dist, n - dist);
    const std::size_t to = (r + n - dist) % n, from = (r + dist) % n;
    auto rq = t.irecv(from, &table[have], cnt * sizeof(Record), tag);
    auto sq = t.isend(to, &table[0], cnt * sizeof(Record), tag);
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
}  // namespace gradsync::detail
