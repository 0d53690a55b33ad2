// SPDX-License-Identifier: Apache-2.0
// Products and sums rounded once each, never fused into a multiply-add: nvcc fuses
// `a * b + c` by default, a host build without FMA cannot, so the functors shared by the
// host loops and the CUDA kernels spell every product and sum with these to compute the
// same bits on both (compress::int8's codes, PowerSGD's products).
#pragma once

#include <type_traits>

#include "gradsync/config.hpp"

namespace gradsync::kernels {

/// x * y rounded once, never fused with a following add.
template <class F>
GRADSYNC_HOST_DEVICE inline F mul_rn(F x, F y) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<F, float>) {
    return __fmul_rn(x, y);
  } else {
    return __dmul_rn(x, y);
  }
#else
  return x * y;
#endif
}

/// x + y rounded once, never fused with a preceding product.
template <class F>
GRADSYNC_HOST_DEVICE inline F add_rn(F x, F y) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<F, float>) {
    return __fadd_rn(x, y);
  } else {
    return __dadd_rn(x, y);
  }
#else
  return x + y;
#endif
}

}  // namespace gradsync::kernels
