// SPDX-License-Identifier: Apache-2.0
// gradsync's non-template functions, compiled once for the whole extension (every source
// file is built with GRADSYNC_SEPARATE_COMPILATION; README, "Separate compilation").
#include <gradsync/src.hpp>
#include <gradsync/src_mpi.hpp>
