// SPDX-License-Identifier: Apache-2.0
// An allreducer's fourth parameter must be a compression policy: a message names the ones
// there are.
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
struct my_compressor {};
void f(gs::transport::local& t) {
  gs::allreducer<gs::transport::local, gs::algo::ring, gs::fusion::none, my_compressor> ar(t);
}
