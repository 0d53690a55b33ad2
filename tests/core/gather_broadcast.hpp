// SPDX-License-Identifier: Apache-2.0
// A deliberately small algorithm that lives outside the library: rank 0 receives every
// rank's vector, reduces them in rank order, finalises (avg divides once) and sends the
// result back. test_algorithm_list.cpp shows that a new host algorithm is this header
// plus one entry in an algorithm list.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include <gradsync/algo/concept.hpp>
#include <gradsync/transport/concept.hpp>

namespace gradsync_test {

struct gather_broadcast {
  static constexpr std::string_view name = "gather_broadcast";
  static constexpr gradsync::algorithm_traits traits{.generic = true};  // the concept only

  template <gradsync::transport_policy Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op op, const gradsync::call_context& ctx) {
    const std::size_t n = t.size(), count = data.size();
    if (n > 1 && count > 0) {
      if (t.rank() == 0) {
        T* tmp = static_cast<T*>(t.scratch().template get<gather_broadcast>(data.size_bytes()));
        for (std::size_t q = 1; q < n; ++q) {
          auto rq = t.irecv(q, tmp, data.size_bytes(), ctx.tag);
          t.wait(rq, ctx.until);
          t.executor().reduce_into(data.data(), tmp, count, op);  // rank order 0, 1, ...
        }
      } else {
        auto sq = t.isend(0, data.data(), data.size_bytes(), ctx.tag);
        t.wait(sq, ctx.until);
      }
    }
    if (t.rank() == 0 || n == 1) t.executor().finalize(data.data(), count, n, op);
    if (n == 1 || count == 0) return;
    if (t.rank() == 0) {
      std::vector<typename Tr::request> sends;
      for (std::size_t q = 1; q < n; ++q)
        sends.push_back(t.isend(q, data.data(), data.size_bytes(), ctx.tag));
      for (auto& s : sends) t.wait(s, ctx.until);
    } else {
      auto rq = t.irecv(0, data.data(), data.size_bytes(), ctx.tag);
      t.wait(rq, ctx.until);
    }
  }
};

}  // namespace gradsync_test
