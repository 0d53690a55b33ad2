// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/algo/halving_doubling.hpp.
#pragma once

#include "gradsync/algo/halving_doubling.hpp"  // gradsync: forwarding header
