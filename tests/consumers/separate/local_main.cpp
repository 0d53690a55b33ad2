// SPDX-License-Identifier: Apache-2.0
// The MPI-free program of check_separate.sh: linked with an object of <gradsync/src.hpp>.
#include "parts.hpp"

int main() {
  return local_part() ? 1 : 0;
}
