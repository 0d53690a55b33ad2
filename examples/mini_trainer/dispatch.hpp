// SPDX-License-Identifier: Apache-2.0
// Flags -> compile-time instantiations. For a transport Tr, table<Tr>() lists one entry
// per (--algo, --fusion, --bucket-mb) choice that composes with Tr, each holding a
// factory for the matching gradient_sync instantiation. The algorithms are gradsync's
// host list (algo/list.hpp, one entry each); a bucket size is one line in add_algorithm(). A choice
// that does not compose (algo::direct without peer access) is left out at compile time and refused
// at run time with the list of what this transport supports.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/algo/list.hpp>
#include <gradsync/algo/runs_on.hpp>
#include <gradsync/gradsync.hpp>

#include "config.hpp"
#include "grad_sync.hpp"
#include "train.hpp"

namespace mini_trainer {

/// One (algorithm, fusion) instantiation for transport Tr.
template <class Tr>
struct dispatch_entry {
  std::string_view algo;    // --algo value
  std::string_view fusion;  // --fusion value
  double bucket_mb;         // --bucket-mb value (fusion bucket only)
  sync_factory<Tr> make;
  std::string_view compress = "none";  // compress_key() of the flags (config.hpp)
};

template <class Tr, class A>
std::unique_ptr<gradient_sync> make_per_tensor(Tr& t, std::vector<std::span<float>> g,
                                               std::vector<gradsync::matrix_shape>) {
  return std::make_unique<per_tensor_sync<Tr, A>>(t, std::move(g));
}
template <class Tr, class A, std::size_t Bytes>
std::unique_ptr<gradient_sync> make_bucket(Tr& t, std::vector<std::span<float>> g,
                                           std::vector<gradsync::matrix_shape> s) {
  return std::make_unique<bucket_sync<Tr, A, gradsync::fusion::bucket<Bytes>>>(t, std::move(g),
                                                                               std::move(s));
}

template <class Tr, class A, std::size_t Bytes, class C>
std::unique_ptr<gradient_sync> make_compressed(Tr& t, std::vector<std::span<float>> g,
                                               std::vector<gradsync::matrix_shape> s) {
  return std::make_unique<bucket_sync<Tr, A, gradsync::fusion::bucket<Bytes>, C>>(t, std::move(g),
                                                                                  std::move(s));
}

/// The compressed entries: every policy of --compress at --bucket-mb 1 (the default), for the
/// default algorithms only (ring; hierarchical on a two_level), so that the build does
/// not instantiate every (algorithm, bucket, compression) triple.
template <class Tr, class A>
void add_compressed(std::vector<dispatch_entry<Tr>>& t, std::string_view name) {
  namespace c = gradsync::compress;
  auto both = [&]<std::size_t Bytes>(double mb) {
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::fp16>, "fp16"});
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::bf16>, "bf16"});
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::int8<>>, "int8"});
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::error_feedback<c::int8<>>>,
                 "ef_int8"});
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::topk<10>>, "topk10"});
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::error_feedback<c::topk<10>>>,
                 "ef_topk10"});
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::topk<1>>, "topk1"});
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::error_feedback<c::topk<1>>>,
                 "ef_topk1"});
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::powersgd<4>>, "powersgd4"});
    t.push_back({name, "bucket", mb,
                 &make_compressed<Tr, A, Bytes, c::error_feedback<c::powersgd<4>>>,
                 "ef_powersgd4"});
    t.push_back({name, "bucket", mb, &make_compressed<Tr, A, Bytes, c::powersgd<1>>, "powersgd1"});
    t.push_back({name, "bucket", mb,
                 &make_compressed<Tr, A, Bytes, c::error_feedback<c::powersgd<1>>>,
                 "ef_powersgd1"});
  };
  both.template operator()<(1u << 20)>(1);
}

/// Adds algorithm A under `name` (fusion none, and bucket in a few compile-time sizes)
/// if A runs on Tr (gradsync::runs_on_v).
template <class Tr, class A>
void add_algorithm(std::vector<dispatch_entry<Tr>>& t, std::string_view name) {
  if constexpr (gradsync::runs_on_v<A, Tr>) {
    t.push_back({name, "none", 0, &make_per_tensor<Tr, A>});
    t.push_back({name, "bucket", 0.25, &make_bucket<Tr, A, (256u << 10)>});
    t.push_back({name, "bucket", 1, &make_bucket<Tr, A, (1u << 20)>});
    t.push_back({name, "bucket", 25, &make_bucket<Tr, A, (25u << 20)>});
    if (name == "ring" || name == "hierarchical") add_compressed<Tr, A>(t, name);
  }
}

template <class Tr>
std::vector<dispatch_entry<Tr>> table() {
  std::vector<dispatch_entry<Tr>> t;
  gradsync::algo::for_each_algorithm<gradsync::algo::host_algorithms>(
      [&]<class A>(std::string_view name) { add_algorithm<Tr, A>(t, name); });
  return t;
}

/// Runs the training with the entry matching --algo/--fusion/--bucket-mb, or explains
/// what this transport offers.
/// --algo direct: the name of direct_two_shot before the algorithm list (kept as an alias).
inline std::string_view algo_name(std::string_view flag) {
  return flag == "direct" ? std::string_view("direct_two_shot") : flag;
}

template <class Tr>
std::string dispatch(Tr& t, const run_context& ctx) {
  const config& c = ctx.cfg;
  const auto entries = table<Tr>();
  const std::string compress = compress_key(c);
  for (const auto& e : entries) {
    if (e.algo == algo_name(c.algo) && e.fusion == c.fusion && e.compress == compress &&
        (c.fusion == "none" || std::fabs(e.bucket_mb - c.bucket_mb) < 1e-9)) {
      return train_rank<Tr>(t, ctx, e.make);
    }
  }
  std::string have;
  for (const auto& e : entries) {
    if ((e.compress == "none") != (compress == "none")) continue;  // list the relevant kind
    have += "\n  --algo " + std::string(e.algo) + " --fusion " + std::string(e.fusion);
    if (e.fusion == "bucket") {
      char mb[32];
      std::snprintf(mb, sizeof mb, " --bucket-mb %g", e.bucket_mb);
      have += mb;
    }
    if (e.compress != "none") have += " (--compress: " + std::string(e.compress) + ")";
  }
  std::string asked = "--algo " + c.algo + " --fusion " + c.fusion;
  if (c.fusion == "bucket") {
    char mb[32];
    std::snprintf(mb, sizeof mb, " --bucket-mb %g", c.bucket_mb);
    asked += mb;
  }
  if (compress != "none") asked += " --compress " + c.compress + " (" + compress + ")";
  throw usage_error(asked + " is not available with --transport " + std::string(Tr::name) +
                    " in this build (bucket sizes are compile-time); available:" + have);
}

}  // namespace mini_trainer
