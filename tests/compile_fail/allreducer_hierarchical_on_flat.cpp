// SPDX-License-Identifier: Apache-2.0
// An allreducer with algo::hierarchical needs a transport::two_level.
#include <gradsync/allreducer.hpp>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  gs::allreducer<gs::transport::local, gs::algo::hierarchical<>> ar(t);
}
