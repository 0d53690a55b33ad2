// SPDX-License-Identifier: Apache-2.0
// The static bucket plan: order, caps, per-type buckets, layout, digest.
#include <doctest/doctest.h>

#include <vector>

#include <gradsync/gradsync.hpp>

namespace gs = gradsync;
namespace fu = gradsync::fusion;

namespace {
std::vector<fu::tensor_desc> descs(std::initializer_list<std::size_t> counts,
                                   gs::dtype t = gs::dtype::f32) {
  std::vector<fu::tensor_desc> d;
  for (auto c : counts) d.push_back({c, t, {}});
  return d;
}
using idx = std::vector<std::size_t>;
}  // namespace

TEST_CASE("plan: reverse registration order, smaller first bucket, cap respected") {
  // 6 tensors of 100 floats (400 B each); first cap 400 B, cap 1000 B.
  const auto d = descs({100, 100, 100, 100, 100, 100});
  const auto p = fu::make_plan(d, 1000, 400, fu::order::reverse);
  REQUIRE(p.buckets.size() == 4);
  CHECK(p.buckets[0].tensors == idx{5});
  CHECK(p.buckets[1].tensors == idx{4, 3});
  CHECK(p.buckets[2].tensors == idx{2, 1});
  CHECK(p.buckets[3].tensors == idx{0});
  CHECK(p.tensor_bucket == idx{3, 2, 2, 1, 1, 0});
  CHECK(p.payload_bytes == 2400);
  // Buckets are cache-line aligned and tensors contiguous inside a bucket.
  for (const auto& b : p.buckets) CHECK(b.offset % fu::bucket_alignment == 0);
  CHECK(p.tensor_offset[3] == p.tensor_offset[4] + 400);
  CHECK(p.tensor_offset[1] == p.tensor_offset[2] + 400);
  CHECK(p.layout_bytes >= p.buckets.back().offset + p.buckets.back().bytes());
}

TEST_CASE("plan: registration order, oversized tensors, cap 0 means one bucket per tensor") {
  const auto d = descs({10, 5000, 10, 10});
  const auto p = fu::make_plan(d, 1024, 1024, fu::order::registration);
  REQUIRE(p.buckets.size() == 3);
  CHECK(p.buckets[0].tensors == idx{0});
  CHECK(p.buckets[1].tensors == idx{1});  // 20000 B > cap: a bucket of its own
  CHECK(p.buckets[2].tensors == idx{2, 3});
  const auto q = fu::make_plan(d, 0, 0, fu::order::reverse);
  REQUIRE(q.buckets.size() == 4);
  CHECK(q.buckets[0].tensors == idx{3});
  CHECK(q.buckets[3].tensors == idx{0});
}

TEST_CASE("plan: one open bucket per element type, buckets in the order they were opened") {
  std::vector<fu::tensor_desc> d{{10, gs::dtype::f32, {}},
                                 {10, gs::dtype::f64, {}},
                                 {10, gs::dtype::f32, {}},
                                 {10, gs::dtype::f16, {}},
                                 {10, gs::dtype::f64, {}}};
  const auto p = fu::make_plan(d, 1 << 20, 1 << 20, fu::order::registration);
  REQUIRE(p.buckets.size() == 3);
  CHECK(p.buckets[0].type == gs::dtype::f32);
  CHECK(p.buckets[0].tensors == idx{0, 2});
  CHECK(p.buckets[1].type == gs::dtype::f64);
  CHECK(p.buckets[1].tensors == idx{1, 4});
  CHECK(p.buckets[2].type == gs::dtype::f16);
  CHECK(p.buckets[2].count == 10);
}

TEST_CASE("plan: the digest depends on counts, types and parameters, never on pointers") {
  const auto a = descs({1, 2, 3});
  auto b = a;
  b[1].name = "renamed";  // names are not part of the plan
  CHECK(fu::make_plan(a, 64, 64, fu::order::reverse).digest ==
        fu::make_plan(b, 64, 64, fu::order::reverse).digest);
  b[1].count = 4;
  CHECK(fu::make_plan(a, 64, 64, fu::order::reverse).digest !=
        fu::make_plan(b, 64, 64, fu::order::reverse).digest);
  CHECK(fu::make_plan(a, 64, 64, fu::order::reverse).digest !=
        fu::make_plan(a, 128, 64, fu::order::reverse).digest);
  CHECK(fu::make_plan(a, 64, 64, fu::order::reverse).digest !=
        fu::make_plan(a, 64, 64, fu::order::registration).digest);
  const auto c = descs({1, 2, 3}, gs::dtype::i32);
  CHECK(fu::make_plan(a, 64, 64, fu::order::reverse).digest !=
        fu::make_plan(c, 64, 64, fu::order::reverse).digest);
}

TEST_CASE("fusion policies satisfy the concept and carry their parameters") {
  static_assert(fu::fusion_policy<fu::none>);
  static_assert(fu::fusion_policy<fu::bucket<1 << 20>>);
  static_assert(fu::bucket<25 << 20>::first_bucket_bytes == (1 << 20));
  static_assert(fu::bucket<4096>::first_bucket_bytes == 4096);
  static_assert(fu::is_zero_copy_v<fu::zero_copy<1 << 20>>);
  static_assert(!fu::is_zero_copy_v<fu::bucket<1 << 20>>);
  static_assert(!fu::is_fused_v<fu::none>);
  CHECK(fu::zero_copy<64>::name == std::string_view("zero_copy"));
}
