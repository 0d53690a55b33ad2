// SPDX-License-Identifier: Apache-2.0
// What a two-level trainer's translation unit pays (docs/build-time.md): shm inside each
// host, mpi across, algo::hierarchical<ring>, bucket fusion, bf16. Timed by
// bench/build_time/measure beside user_tu.cpp, in both modes; built by nobody else.
#include <mpi.h>

#include <span>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

namespace gs = gradsync;

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  {
    auto t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD);
    gs::allreducer<decltype(t), gs::algo::hierarchical<gs::algo::ring>,
                   gs::fusion::bucket<25 << 20>, gs::compress::bf16>
        sync{t};
    std::vector<float> grad(1 << 20, 1.0f);
    sync.allreduce(std::span<float>(grad), gs::op::avg);
  }
  MPI_Finalize();
}
