// SPDX-License-Identifier: Apache-2.0
// What every libtorch unit of the build parses (tests/torch, examples/torch_trainer):
// torch's C++ API (about 10 s a unit) and gradsync's umbrella, precompiled once per
// optimisation level with -Dtest_pch (GCC) and force-included. Nothing of
// include/gradsync/torch/: the mutation build defines a macro those headers read. No
// include guard: it is only ever the first header of a unit.

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include <gradsync/gradsync.hpp>
