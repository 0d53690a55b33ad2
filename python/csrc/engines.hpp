// SPDX-License-Identifier: Apache-2.0
// The engine of each transport, one source file each (engine_shm.cpp, engine_mpi.cpp,
// engine_two_level.cpp); launch.cpp picks one. Needs MPI's header (two_level, mpi).
#pragma once

#include <memory>

#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/shm.hpp>
#include <gradsync/transport/two_level.hpp>

#include "engine.hpp"

namespace gradsync_torch {

/// Processes of one host: algo::auto_select over transport::shm.
std::unique_ptr<engine> make_engine(gradsync::transport::shm t);
/// One rank per host: algo::auto_select over transport::mpi.
std::unique_ptr<engine> make_engine(gradsync::transport::mpi t);
/// Several ranks on each of several hosts: algo::hierarchical<> over shm inside a host and
/// mpi across hosts.
std::unique_ptr<engine> make_engine(
    gradsync::transport::two_level<gradsync::transport::shm, gradsync::transport::mpi> t);

}  // namespace gradsync_torch
