// The README example of bucket fusion (docs/fusion.md shows this file verbatim; the
// test test_readme_fusion.cpp compiles and runs it on two in-process ranks).
#pragma once

#include <cstdio>
#include <span>
#include <vector>

#include <gradsync/gradsync.hpp>

namespace gs = gradsync;

using sync_t = gs::allreducer<gs::transport::local,           // who moves the bytes
                              gs::algo::auto_select,          // ring / tree / ... by size
                              gs::fusion::bucket<25 << 20>>;  // 25 MiB buckets, first 1 MiB

/// `grads`: the model's gradient tensors in registration (forward) order.
/// `backward(i)`: computes layer i's gradient into grads[i].
template <class Backward>
void train(gs::transport::local& comm, std::vector<std::vector<float>>& grads, int steps,
           Backward&& backward) {
  sync_t sync{comm};
  for (auto& g : grads) sync.add(std::span<float>(g));  // once; the same list on every rank
  sync.commit(gs::op::avg);  // static plan, checked across ranks (mismatch names the tensor)
  for (int step = 0; step < steps; ++step) {
    for (std::size_t i = grads.size(); i-- > 0;) {  // backward: last layer first
      backward(i);
      sync.ready(i);  // a bucket launches, in plan order, once all its gradients are ready
    }
    sync.wait();  // every gradient averaged; bitwise identical on every rank
  }
  if (comm.rank() == 0) std::printf("%s\n", sync.summary().c_str());
}
