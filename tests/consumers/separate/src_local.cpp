// SPDX-License-Identifier: Apache-2.0
// gradsync's non-template functions for a program without MPI (separate compilation).
#include <gradsync/src.hpp>
