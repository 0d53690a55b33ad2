// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/algo/auto_select.hpp.
#pragma once

#include "gradsync/algo/auto_select.hpp"  // gradsync: forwarding header
