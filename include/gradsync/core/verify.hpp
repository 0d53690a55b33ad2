// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/check/verify.hpp.
#pragma once

#include "gradsync/check/verify.hpp"  // gradsync: forwarding header
