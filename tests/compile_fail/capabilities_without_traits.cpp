// SPDX-License-Identifier: Apache-2.0
// An algorithm written for 0.1 (separate bool members, no traits) is refused with the
// way to declare its capabilities, instead of running with none of them.
#include <span>
#include <string_view>
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct old_style {
  static constexpr std::string_view name = "old_style";
  static constexpr bool needs_peer_access = false;
  static constexpr bool needs_native = false;
  static constexpr bool generic = true;
  template <class Tr, class T, class Op>
  static void run(Tr& t, std::span<T> data, Op op, const gs::call_context& c) {
    gs::algo::ring::run(t, data, op, c);
  }
};
void f(gs::transport::local& t) {
  std::vector<float> v(4);
  gs::allreduce<old_style>(t, std::span<float>(v), gs::op::sum);
}
