// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/transport/shm/launch.hpp.
#pragma once

#include "gradsync/transport/shm/launch.hpp"  // gradsync: forwarding header
