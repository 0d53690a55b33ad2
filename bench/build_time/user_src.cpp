// SPDX-License-Identifier: Apache-2.0
// The one source file of a separately compiled program (-DGRADSYNC_SEPARATE_COMPILATION):
// gradsync's non-template functions, MPI's included. bench/build_time/measure times it
// beside user_tu.cpp.
#include <gradsync/src.hpp>
#include <gradsync/src_mpi.hpp>
