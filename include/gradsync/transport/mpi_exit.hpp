// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/transport/mpi/exit.hpp.
#pragma once

#include "gradsync/transport/mpi/exit.hpp"  // gradsync: forwarding header
