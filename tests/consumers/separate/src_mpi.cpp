// SPDX-License-Identifier: Apache-2.0
// transport::mpi's non-template functions (separate compilation); the rest of gradsync's
// are in src_local.cpp: the two headers may share a file or not.
#include <gradsync/src_mpi.hpp>
