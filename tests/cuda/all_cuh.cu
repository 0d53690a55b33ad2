// SPDX-License-Identifier: Apache-2.0
// Every .cuh header compiles under nvcc and instantiates for every element type.
#include <gradsync/kernels/elementwise.cuh>
#include <gradsync/kernels/ipc.cuh>
#include <gradsync/kernels/pack.cuh>
#include <gradsync/kernels/quantize.cuh>
#include <gradsync/transport/cuda_ipc.hpp>
#if defined(GRADSYNC_HAVE_NCCL)
#include <gradsync/algo/nccl_ring.hpp>
#endif

namespace gs = gradsync;

template <class T>
void instantiate(gs::transport::cuda_ipc& ipc, T* p, std::size_t n) {
  const gs::call_context ctx{gs::deadline::after(gs::seconds_d{1}), 0, 0};
  ipc.two_shot(p, n, gs::op::sum, ctx);
  ipc.one_shot(p, n, gs::op::max, ctx);
}
template void instantiate<float>(gs::transport::cuda_ipc&, float*, std::size_t);
template void instantiate<gs::half>(gs::transport::cuda_ipc&, gs::half*, std::size_t);
template void instantiate<std::int64_t>(gs::transport::cuda_ipc&, std::int64_t*, std::size_t);

// compress::int8's device kernels, for both types it codes.
template <class T>
void instantiate_int8(float* scales, std::int8_t* codes, T* x, T* residual, std::size_t n) {
  namespace d = gs::kernels::device;
  d::block_absmax(scales, x, n, 256, nullptr);
  d::quantize_blocks(codes, residual, x, scales, n, 256, 63, nullptr);
  d::dequantize_blocks(x, codes, scales, n, 256, 63, 2, nullptr);
}
template void instantiate_int8<float>(float*, std::int8_t*, float*, float*, std::size_t);
template void instantiate_int8<double>(float*, std::int8_t*, double*, double*, std::size_t);
