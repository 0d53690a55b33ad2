// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/transport/shm/from_mpi.hpp.
#pragma once

#include "gradsync/transport/shm/from_mpi.hpp"  // gradsync: forwarding header
