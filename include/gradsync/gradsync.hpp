// SPDX-License-Identifier: Apache-2.0
// Umbrella header: everything that compiles with a plain host compiler. MPI, NCCL and
// CUDA pieces have their own headers (transport/mpi.hpp, transport/nccl.hpp, ...).
#pragma once

#include "gradsync/config.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/half.hpp"
#include "gradsync/core/op.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/local.hpp"
#include "gradsync/transport/run_local.hpp"
#include "gradsync/algorithm/concept.hpp"
#include "gradsync/algorithm/ring.hpp"
#include "gradsync/algorithm/tree.hpp"
#include "gradsync/algorithm/halving_doubling.hpp"
#include "gradsync/algorithm/auto_select.hpp"
#include "gradsync/algorithm/hierarchical.hpp"
#include "gradsync/algorithm/runs_on.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/allreducer.hpp"
