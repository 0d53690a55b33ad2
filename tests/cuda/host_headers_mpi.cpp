// The MPI-facing CUDA headers compile with the plain host compiler.
#include <gradsync/algorithm/native.hpp>
#include <gradsync/transport/mpi_device.hpp>
#include <gradsync/transport/nccl_mpi.hpp>

namespace gs = gradsync;

void gradsync_host_staged_allreduce(gs::transport::mpi_device& t, float* gpu, std::size_t n) {
  gs::allreduce<gs::algo::native>(t, gs::device_span<float>(gpu, n), gs::op::sum);
  t.synchronize(gs::deadline::after(gs::seconds_d{10}));
}
