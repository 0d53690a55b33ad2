// SPDX-License-Identifier: Apache-2.0
// Separate compilation of the MPI parts (config.hpp, src.hpp): include this header, after
// <gradsync/src.hpp>, in the one source file that holds gradsync's functions, in a program
// that uses transport::mpi, two_level_from_mpi or shm_from_mpi. Compile that file with the
// same MPI as the rest.
#pragma once

#include "gradsync/config.hpp"

#if GRADSYNC_HEADER_ONLY
#error \
    "gradsync/src_mpi.hpp is for separate compilation: define GRADSYNC_SEPARATE_COMPILATION in every translation unit of the program (or do not compile this file)"
#else
#include "gradsync/transport/mpi.ipp"
#include "gradsync/transport/mpi/node.ipp"
#include "gradsync/transport/shm/from_mpi.ipp"
#include "gradsync/transport/two_level/from_mpi.ipp"
#endif
