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
#include "gradsync/transport/local/run.hpp"
#include "gradsync/algo/concept.hpp"
#include "gradsync/algo/ring.hpp"
#include "gradsync/algo/tree.hpp"
#include "gradsync/algo/halving_doubling.hpp"
#include "gradsync/algo/auto_select.hpp"
#include "gradsync/algo/hierarchical.hpp"
#include "gradsync/algo/runs_on.hpp"
#include "gradsync/allgather.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/allreducer.hpp"
#include "gradsync/compress/error_feedback.hpp"
#include "gradsync/compress/int8.hpp"
#include "gradsync/compress/powersgd.hpp"
#include "gradsync/compress/topk.hpp"
