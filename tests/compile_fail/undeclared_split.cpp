// SPDX-License-Identifier: Apache-2.0
// A split() the traits do not declare: process_set would once have probed for it; now a
// transport says .splits = true or its split does not compile into a process_set.
#include <gradsync/gradsync.hpp>
#include <gradsync/process_set.hpp>
namespace gs = gradsync;
struct own_local : gs::transport::local {
  using local::local;
  static constexpr gs::transport_traits traits{.watches_stalls = true, .aborts = true};
  own_local split(int, int, gs::deadline) { return own_local(local::split(0, 0)); }
  explicit own_local(local&& l) : local(std::move(l)) {}
};
void f(own_local& t) {
  gs::process_set<own_local> s(t, {0});
}
