// SPDX-License-Identifier: Apache-2.0
// An allreducer over a transport::two_level takes algo::hierarchical only.
#include <gradsync/allreducer.hpp>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
using two_level = gs::transport::two_level<gs::transport::local, gs::transport::local>;
void f(two_level& t) {
  gs::allreducer<two_level, gs::algo::ring> ar(t);
}
