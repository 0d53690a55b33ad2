// SPDX-License-Identifier: Apache-2.0
// Separate compilation (config.hpp): include this header in exactly one source file of a
// program built with GRADSYNC_SEPARATE_COMPILATION defined everywhere; that file then
// holds gradsync's large functions that are not templates (every .ipp but
// transport/mpi.ipp), and the other files only declare them. A program that uses
// transport::mpi includes <gradsync/src_mpi.hpp> there too.
#pragma once

#include "gradsync/config.hpp"

#if GRADSYNC_HEADER_ONLY
#error \
    "gradsync/src.hpp is for separate compilation: define GRADSYNC_SEPARATE_COMPILATION in every translation unit of the program (or do not compile this file)"
#else
#include "gradsync/allreducer/allreducer_core.ipp"
#include "gradsync/check/consistency.ipp"
#include "gradsync/core/async.ipp"
#include "gradsync/core/error.ipp"
#include "gradsync/core/stall.ipp"
#include "gradsync/transport/shm.ipp"
#include "gradsync/transport/shm/roster.ipp"
#include "gradsync/transport/shm/segment.ipp"
#endif
