// SPDX-License-Identifier: Apache-2.0
// compress::int8 codes sums: a plan committed for op::max is refused, naming the ops it
// takes and what to use instead.
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  gs::allreducer<gs::transport::local, gs::algo::ring, gs::fusion::bucket<1 << 20>,
                 gs::compress::int8<>>
      ar(t);
  ar.commit(gs::op::max);
}
