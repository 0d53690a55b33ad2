// SPDX-License-Identifier: Apache-2.0
// Every .cuh header compiles under nvcc; cuda_ipc's kernels instantiate for three element
// types.
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

// The codecs' kernels (quantize, select, lowrank) are instantiated, and run against their
// host twins, by test_compress_kernels.cu.
