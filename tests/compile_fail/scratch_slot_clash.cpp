// SPDX-License-Identifier: Apache-2.0
// Two entries of one algorithm list may not declare the same workspace slot: a new
// algorithm that takes ring's slot is refused with the way out.
#include <span>
#include <gradsync/algo/list.hpp>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct slot_thief {
  static constexpr std::string_view name = "slot_thief";
  static constexpr bool needs_peer_access = false;
  static constexpr bool needs_native = false;
  static constexpr std::size_t scratch_slot = 0;  // ring's
  template <class Tr, class T, class Op>
  static void run(Tr&, std::span<T>, Op, const gs::call_context&) {}
};
using list = gs::algo::extend_t<gs::algo::host_algorithms, gs::algo::named<slot_thief, "thief">>;
void f() {
  gs::algo::for_each_algorithm<list>([]<class A>(std::string_view) {});
}
