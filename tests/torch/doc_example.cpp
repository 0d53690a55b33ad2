#include <cstdio>

#include <torch/torch.h>

#include <gradsync/gradsync.hpp>
#include <gradsync/torch/data_parallel.hpp>
namespace gs = gradsync;

int main() {
  torch::set_num_threads(1);  // the ranks are the parallelism
  // Two ranks as threads of this process; under mpirun use gs::transport::mpi{MPI_COMM_WORLD}.
  gs::transport::run_local(2, [](gs::transport::local& t) {
    torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::ReLU(),
                                torch::nn::Linear(8, 1));

    // DDP's buckets (1 MiB, then 25 MiB) in gradsync's arena: each .grad is a view into it.
    using sync_t = gs::allreducer<gs::transport::local, gs::algo::auto_select,
                                  gs::fusion::zero_copy<25 << 20>>;
    gs::torch::data_parallel<sync_t> dp(*model, t);  // rank 0's weights everywhere; plan agreed

    torch::optim::SGD opt(model->parameters(), 0.1);
    for (int step = 0; step < 5; ++step) {
      const auto x = torch::full({16, 4}, float(t.rank() + 1));  // this rank's batch
      opt.zero_grad();
      model->forward(x).pow(2).mean().backward();  // buckets go out during backward; its end waits
      opt.step();                                  // every rank steps with the averaged gradient
    }
    dp.check_replicas();  // throws gradsync::error (diverged) if any rank's weights differ
    if (t.rank() == 0)
      std::printf("%zu steps, replicas identical\n%s\n", dp.steps(), dp.sync().summary().c_str());
  });
}
