// SPDX-License-Identifier: Apache-2.0
// The MPI program of check_separate.sh: both parts, linked with the objects of
// <gradsync/src.hpp> and <gradsync/src_mpi.hpp>. Exit 0 when every rank's results are right.
#include <mpi.h>

#include "parts.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int bad = local_part() + mpi_part();
  int all = 0;
  MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return all ? 1 : 0;
}
