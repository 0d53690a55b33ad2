// SPDX-License-Identifier: Apache-2.0
// Every .cuh header compiles under nvcc and instantiates for every element type.
#include <gradsync/kernels/elementwise.cuh>
#include <gradsync/kernels/ipc.cuh>
#include <gradsync/kernels/lowrank.cuh>
#include <gradsync/kernels/pack.cuh>
#include <gradsync/kernels/quantize.cuh>
#include <gradsync/kernels/select.cuh>
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

// compress::topk's and compress::powersgd's device kernels, for both types they code.
template <class T>
void instantiate_topk(std::uint32_t* idx, T* x, T* add, T* val, std::size_t n) {
  namespace d = gs::kernels::device;
  d::topk_buffers<T> buf;
  d::topk_indices(idx, x, n, n / 100, buf, add, nullptr);
  d::topk_gather(val, add, x, idx, n / 100, T(0.5), nullptr);
  d::topk_scatter_add(x, val, idx, n / 100, nullptr);
}
template void instantiate_topk<float>(std::uint32_t*, float*, float*, float*, std::size_t);
template void instantiate_topk<double>(std::uint32_t*, double*, double*, double*, std::size_t);

template <class T>
void instantiate_lowrank(T* pt, T* m, T* add, T* qt, std::size_t rows, std::size_t cols) {
  namespace d = gs::kernels::device;
  d::seeded_uniform(qt, 4 * cols, 1, nullptr);
  d::lowrank_mq<4>(pt, m, add, qt, rows, cols, nullptr);
  d::orthonormalise(pt, rows, 4, nullptr);
  d::lowrank_mtp<4>(qt, m, pt, rows, cols, nullptr);
  d::lowrank_pqt<4>(m, add, pt, qt, qt, rows, cols, T(0.5), nullptr);
  d::lowrank_mq<1>(pt, m, static_cast<const T*>(nullptr), qt, rows, cols, nullptr);
}
template void instantiate_lowrank<float>(float*, float*, float*, float*, std::size_t, std::size_t);
template void instantiate_lowrank<double>(double*, double*, double*, double*, std::size_t,
                                          std::size_t);
