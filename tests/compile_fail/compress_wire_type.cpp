// SPDX-License-Identifier: Apache-2.0
// compress::cast<Wire> with a Wire that is not a 16-bit float must be rejected, saying
// which types it takes.
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  gs::allreducer<gs::transport::local, gs::algo::ring, gs::fusion::none, gs::compress::cast<int>>
      ar(t);
}
