// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/check/consistency.hpp.
#pragma once

#include "gradsync/check/consistency.hpp"  // gradsync: forwarding header
