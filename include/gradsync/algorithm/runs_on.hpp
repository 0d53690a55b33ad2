// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/algo/runs_on.hpp.
#pragma once

#include "gradsync/algo/runs_on.hpp"  // gradsync: forwarding header
