// SPDX-License-Identifier: Apache-2.0
// The parts of the separately compiled test program (check_separate.sh); each returns its
// count of wrong results.
#pragma once

int local_part();
int mpi_part();
