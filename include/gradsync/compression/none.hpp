// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/compress/none.hpp.
#pragma once

#include "gradsync/compress/none.hpp"  // gradsync: forwarding header
