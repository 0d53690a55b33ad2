// SPDX-License-Identifier: Apache-2.0
// algo::nccl_ring's schedule on the CPU: the same run_device over transport::local
// (threads as ranks) with host scratch standing in for device scratch and the host
// executor standing in for the kernels. Checks the chunk arithmetic of both phases:
// exact results for every op, bitwise identical on every rank, 1..6 ranks, counts
// smaller than the rank count included.
#include <doctest/doctest.h>

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/algo/nccl_ring.hpp>

#include "watchdog.hpp"

namespace gs = gradsync;

namespace {

// transport::local seen through nccl_ring's requirements.
struct local_as_device {
  gs::transport::local& t;
  std::vector<std::byte> scratch;
  using request = gs::transport::local::request;
  std::size_t rank() const { return t.rank(); }
  std::size_t size() const { return t.size(); }
  request isend(std::size_t p, const void* d, std::size_t b, std::uint32_t tag) {
    return t.isend(p, d, b, tag);
  }
  request irecv(std::size_t p, void* d, std::size_t b, std::uint32_t tag) {
    return t.irecv(p, d, b, tag);
  }
  void wait(request& r, gs::deadline d) { t.wait(r, d); }
  gs::kernels::host_executor executor() const { return {}; }
  void* device_scratch(std::size_t bytes) {
    if (scratch.size() < bytes) scratch.resize(bytes);
    return scratch.data();
  }
};

template <class T, class Op>
void check(std::size_t n, std::size_t count, Op op) {
  std::vector<std::size_t> wrong(n, 99);
  std::vector<std::uint64_t> hash(n);
  gs::transport::run_local(n, [&](gs::transport::local& t) {
    local_as_device w{t, {}};
    std::vector<T> v(count);
    gs::testing::fill_inputs(std::span<T>(v), Op::id, t.rank(), n);
    const gs::call_context ctx{gs::deadline::after(gs::seconds_d{30}), 0, 7};
    gs::algo::nccl_ring::run_device(w, gs::device_span<T>(v.data(), count), op, ctx);
    wrong[t.rank()] = gs::testing::count_wrong(std::span<const T>(v), Op::id, n);
    hash[t.rank()] = gs::testing::fnv1a64(v.data(), count * sizeof(T));
  });
  INFO("ranks " << n << " count " << count << " op " << static_cast<int>(Op::id));
  CHECK(wrong == std::vector<std::size_t>(n, 0));
  for (std::size_t r = 1; r < n; ++r) CHECK(hash[r] == hash[0]);
}

}  // namespace

TEST_CASE("nccl_ring schedule over local ranks: exact and bitwise identical") {
  gs::testbed::watchdog wd(120, "nccl_ring schedule");
  for (std::size_t n = 1; n <= 6; ++n) {
    for (std::size_t count :
         {std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{65537}}) {
      check<float>(n, count, gs::op::sum);
      check<gs::bfloat16>(n, count, gs::op::avg);
      check<std::int64_t>(n, count, gs::op::max);
      check<double>(n, count, gs::op::prod);
    }
  }
}
