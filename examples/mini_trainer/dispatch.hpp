// SPDX-License-Identifier: Apache-2.0
// Flags -> compile-time instantiations. For a transport Tr, table<Tr>() lists one entry
// per (--algo, --fusion, --compress) choice that composes with Tr, each holding a factory
// for the matching gradient_sync instantiation. The algorithms are gradsync's host list
// (algo/list.hpp, one entry each); --bucket-mb is a run-time value
// (allreducer_options::bucket_bytes), so one instantiation serves every size. A choice
// that does not compose (algo::direct without peer access) is left out at compile time
// and refused at run time with the list of what this transport supports.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <gradsync/algo/list.hpp>
#include <gradsync/algo/runs_on.hpp>
#include <gradsync/gradsync.hpp>

#include "config.hpp"
#include "grad_sync.hpp"
#include "train.hpp"

namespace mini_trainer {

/// One (algorithm, fusion, compression) instantiation for transport Tr.
template <class Tr>
struct dispatch_entry {
  std::string_view algo;    // --algo value
  std::string_view fusion;  // --fusion value
  sync_factory<Tr> make;
  std::string_view compress = "none";     // compress_key() of the flags (config.hpp)
  code_factory<Tr> make_codes = nullptr;  // --reproducible's (uncompressed entries)
};

template <class Tr, class A>
std::unique_ptr<gradient_sync> make_per_tensor(Tr& t, std::vector<std::span<float>> g,
                                               std::vector<gradsync::matrix_shape>, std::size_t) {
  return std::make_unique<per_tensor_sync<Tr, A>>(t, std::move(g));
}
template <class Tr, class A>
std::unique_ptr<gradient_sync> make_per_tensor_codes(Tr& t, std::vector<std::span<std::int64_t>> c,
                                                     std::size_t) {
  return std::make_unique<per_tensor_sync<Tr, A, std::int64_t, gradsync::op::sum_t>>(t,
                                                                                     std::move(c));
}
template <class Tr, class A>
std::unique_ptr<gradient_sync> make_bucket_codes(Tr& t, std::vector<std::span<std::int64_t>> c,
                                                 std::size_t bucket_bytes) {
  return std::make_unique<bucket_sync<Tr, A, gradsync::fusion::bucket<(1u << 20)>,
                                      gradsync::compress::none, std::int64_t, gradsync::op::sum_t>>(
      t, std::move(c), std::vector<gradsync::matrix_shape>{}, bucket_bytes);
}
/// The bucket policy's own size is only the default; the run's cap replaces it.
template <class Tr, class A, class C = gradsync::compress::none>
std::unique_ptr<gradient_sync> make_bucket(Tr& t, std::vector<std::span<float>> g,
                                           std::vector<gradsync::matrix_shape> s,
                                           std::size_t bucket_bytes) {
  return std::make_unique<bucket_sync<Tr, A, gradsync::fusion::bucket<(1u << 20)>, C>>(
      t, std::move(g), std::move(s), bucket_bytes);
}

/// The compressed entries: every policy of --compress, for the default algorithms only
/// (ring; hierarchical on a two_level), so that the build does not instantiate every
/// (algorithm, compression) pair.
template <class Tr, class A>
void add_compressed(std::vector<dispatch_entry<Tr>>& t, std::string_view name) {
  namespace c = gradsync::compress;
  auto add = [&]<class C>(std::string_view key) {
    t.push_back({name, "bucket", &make_bucket<Tr, A, C>, key});
  };
  add.template operator()<c::fp16>("fp16");
  add.template operator()<c::bf16>("bf16");
  add.template operator()<c::int8<>>("int8");
  add.template operator()<c::error_feedback<c::int8<>>>("ef_int8");
  add.template operator()<c::topk<10>>("topk10");
  add.template operator()<c::error_feedback<c::topk<10>>>("ef_topk10");
  add.template operator()<c::topk<1>>("topk1");
  add.template operator()<c::error_feedback<c::topk<1>>>("ef_topk1");
  add.template operator()<c::powersgd<4>>("powersgd4");
  add.template operator()<c::error_feedback<c::powersgd<4>>>("ef_powersgd4");
  add.template operator()<c::powersgd<1>>("powersgd1");
  add.template operator()<c::error_feedback<c::powersgd<1>>>("ef_powersgd1");
}

/// The algorithms that get the compressed entries. A compile-time test: a run-time one
/// on the name would still instantiate all 12 compressed allreducers for every algorithm.
template <class A>
inline constexpr bool compressed_algorithm =
    std::is_same_v<A, gradsync::algo::ring> || std::is_same_v<A, gradsync::algo::hierarchical<>>;

/// Adds algorithm A under `name` (fusion none, and bucket) if A runs on Tr
/// (gradsync::runs_on_v).
template <class Tr, class A>
void add_algorithm(std::vector<dispatch_entry<Tr>>& t, std::string_view name) {
  if constexpr (gradsync::runs_on_v<A, Tr>) {
    t.push_back({name, "none", &make_per_tensor<Tr, A>, "none", &make_per_tensor_codes<Tr, A>});
    t.push_back({name, "bucket", &make_bucket<Tr, A>, "none", &make_bucket_codes<Tr, A>});
    if constexpr (compressed_algorithm<A>) add_compressed<Tr, A>(t, name);
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
    if (e.algo == algo_name(c.algo) && e.fusion == c.fusion && e.compress == compress) {
      return train_rank<Tr>(t, ctx, e.make, e.make_codes);
    }
  }
  std::string have;
  for (const auto& e : entries) {
    if ((e.compress == "none") != (compress == "none")) continue;  // list the relevant kind
    have += "\n  --algo " + std::string(e.algo) + " --fusion " + std::string(e.fusion);
    if (e.compress != "none") have += " (--compress: " + std::string(e.compress) + ")";
  }
  std::string asked = "--algo " + c.algo + " --fusion " + c.fusion;
  if (compress != "none") asked += " --compress " + c.compress + " (" + compress + ")";
  throw usage_error(asked + " is not available with --transport " + std::string(Tr::name) +
                    " in this build; available:" + have);
}

}  // namespace mini_trainer
