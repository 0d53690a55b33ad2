// SPDX-License-Identifier: Apache-2.0
// What a user pays to include gradsync (issue 22): one translation unit with the composed
// allreducer of a typical MPI trainer, every element type the façade dispatches to.
// Timed by bench/build_time/measure (docs/build-time.md), header-only and with
// -DGRADSYNC_SEPARATE_COMPILATION (user_src.cpp then holds gradsync's functions); built by
// nobody else.
#include <mpi.h>

#include <span>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/transport/mpi.hpp>

namespace gs = gradsync;

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  {
    gs::transport::mpi t{MPI_COMM_WORLD};
    gs::allreducer<gs::transport::mpi, gs::algo::auto_select, gs::fusion::bucket<25 << 20>,
                   gs::compress::bf16>
        sync{t};
    std::vector<float> grad(1 << 20, 1.0f);
    sync.allreduce(std::span<float>(grad), gs::op::avg);
  }
  MPI_Finalize();
}
