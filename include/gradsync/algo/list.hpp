// SPDX-License-Identifier: Apache-2.0
// gradsync's host algorithms in one list, for everything that iterates over them
// (allreduce_perf's --algo, the trainer's --algo and --help, test_runs_on, the MPI
// matrix): a new algorithm is its header plus one entry here. Users of the list skip
// the pairs that do not compose (runs_on_v): an entry may need peer access, a native
// allreduce or a two_level.
//
//   gs::algo::with_algorithm<gs::algo::host_algorithms>("tree", [&]<class A>() {
//     gs::allreduce<A>(t, span, gs::op::sum);
//   });
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "gradsync/algo/auto_select.hpp"
#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/direct.hpp"
#include "gradsync/algo/halving_doubling.hpp"
#include "gradsync/algo/hierarchical.hpp"
#include "gradsync/algo/native.hpp"
#include "gradsync/algo/ring.hpp"
#include "gradsync/algo/tree.hpp"

namespace gradsync::algo {

/// A name of N - 1 characters usable as a template argument (named<A, "ring">).
template <std::size_t N>
struct fixed_name {
  char text[N] = {};
  constexpr fixed_name(const char (&s)[N]) {  // NOLINT: implicit from a literal on purpose
    for (std::size_t i = 0; i < N; ++i) text[i] = s[i];
  }
  constexpr std::string_view view() const { return {text, N - 1}; }
};

/// One list entry: algorithm A under the name programs accept for it (--algo NAME).
template <class A,          ///< the algorithm type
          fixed_name Name>  ///< its command-line name
struct named {
  using type = A;
  static constexpr std::string_view name = Name.view();
};

/// A list of named<...> entries. Each entry declares its traits (algo/concept.hpp); its
/// scratch buffers are keyed by type in the transport's workspace, so entries cannot
/// collide there.
template <class... Entries>
struct algorithm_list {
  static_assert((declares_traits<typename Entries::type> && ...),
                "gradsync: every algorithm of a list declares `static constexpr "
                "gradsync::algorithm_traits traits{...}` (algo/concept.hpp)");
};

/// The list with more entries appended (a test's own algorithm, a user's).
template <class List, class... More>
struct extend;
template <class... Entries, class... More>
struct extend<algorithm_list<Entries...>, More...> {
  using type = algorithm_list<Entries..., More...>;
};
template <class List, class... More>
using extend_t = typename extend<List, More...>::type;

// clang-format off
/// Every host algorithm of gradsync, flat ones first.
using host_algorithms = algorithm_list<
    named<ring, "ring">,
    named<tree, "tree">,
    named<halving_doubling, "halving_doubling">,
    named<direct_one_shot, "direct_one_shot">,
    named<direct_two_shot, "direct_two_shot">,
    named<native, "native">,
    named<auto_select, "auto">,
    named<hierarchical<>, "hierarchical">,
    named<hierarchical<native>, "hierarchical_native">>;
// clang-format on

/// Calls f.template operator()<A>(name) for every entry of List, in order.
template <class List, class F>
void for_each_algorithm(F&& f) {
  [&]<class... E>(algorithm_list<E...>) {
    (f.template operator()<typename E::type>(E::name), ...);
  }(List{});
}

/// Calls f.template operator()<A>() for the entry of List called `name`; false if none is.
template <class List, class F>
bool with_algorithm(std::string_view name, F&& f) {
  bool found = false;
  for_each_algorithm<List>([&]<class A>(std::string_view n) {
    if (!found && n == name) {
      found = true;
      f.template operator()<A>();
    }
  });
  return found;
}

/// The entries' names, in list order (for --help and error messages).
template <class List>
constexpr auto algorithm_names() {
  return []<class... E>(algorithm_list<E...>) {
    return std::array<std::string_view, sizeof...(E)>{E::name...};
  }(List{});
}

}  // namespace gradsync::algo
