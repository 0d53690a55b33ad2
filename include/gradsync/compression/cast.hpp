// SPDX-License-Identifier: Apache-2.0
// Deprecated path (gradsync 0.1; goes in 0.2): use gradsync/compress/cast.hpp.
#pragma once

#include "gradsync/compress/cast.hpp"  // gradsync: forwarding header
