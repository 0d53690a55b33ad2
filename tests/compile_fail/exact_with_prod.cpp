// SPDX-License-Identifier: Apache-2.0
// compress::exact makes sums reproducible: a plan committed for op::prod is refused,
// saying what to use for a product.
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;
void f(gs::transport::local& t) {
  gs::allreducer<gs::transport::local, gs::algo::ring, gs::fusion::bucket<1 << 20>,
                 gs::compress::exact<>>
      ar(t);
  ar.commit(gs::op::prod);
}
