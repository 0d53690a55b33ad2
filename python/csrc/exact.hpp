// SPDX-License-Identifier: Apache-2.0
// The Python binding of compress::exact_accumulator (exact.cpp), registered by module.cpp.
#pragma once

#include <pybind11/pybind11.h>

namespace gradsync_torch {

/// Adds _ExactCore to the extension module `m`.
void bind_exact(pybind11::module_& m);

}  // namespace gradsync_torch
