#include <algorithm>
#include <cstdio>
#include <vector>
#include <gradsync/gradsync.hpp>
namespace gs = gradsync;

int main() {
  gs::transport::run_local(2, [](gs::transport::local& t) {
    // A model's gradient tensors, in registration (forward) order.
    std::vector<std::vector<float>> grads;
    for (std::size_t n : {9408, 64, 64, 36864, 64, 64, 2048000, 1000}) grads.emplace_back(n);

    // Bucket fusion: 25 MiB buckets (the first one 1 MiB), launched in a fixed order.
    using sync_t =
        gs::allreducer<gs::transport::local, gs::algo::auto_select, gs::fusion::bucket<25 << 20>>;
    sync_t sync{t};
    for (auto& g : grads) sync.add(std::span<float>(g));  // once, the same list on every rank
    sync.commit(gs::op::avg);                             // the static plan, checked across ranks

    for (int step = 0; step < 3; ++step) {
      for (std::size_t i = grads.size(); i-- > 0;) {  // backward: last layer first
        std::fill(grads[i].begin(), grads[i].end(), float(t.rank() + 1));  // "compute"
        sync.ready(i);  // a bucket starts on the background thread once it is complete
      }
      sync.wait();  // every gradient averaged (1.5), bitwise identical on every rank
    }
    if (t.rank() == 0) std::printf("grad[0][0] = %g\n%s\n", grads[0][0], sync.summary().c_str());
  });
}
