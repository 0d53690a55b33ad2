// SPDX-License-Identifier: Apache-2.0
// A .cuh kernel header included by a plain host compiler must stop with a clear #error.
#include <gradsync/kernels/elementwise.cuh>
int main() {
  return 0;
}
