// SPDX-License-Identifier: Apache-2.0
// Flags -> compile-time instantiations, per transport Tr: one entry per (--algo, --fusion,
// --compress) choice for --sync overlap, one per --algo for --sync per-parameter. The
// algorithms are ring and auto_select on a flat transport, hierarchical on a two_level;
// compression is built for the default algorithm only, so the build does not
// instantiate every (algorithm, compression) pair. --bucket-mb is a run-time value.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "config.hpp"
#include "sync.hpp"
#include "train.hpp"

namespace torch_trainer {

template <class Tr>
struct dispatch_entry {
  std::string_view sync;  // --sync
  std::string key;        // composition_key() of the flags
  sync_factory<Tr> make;
};

template <class Tr, class Sync>
std::unique_ptr<grad_sync> make_overlap(Tr& t, torch::nn::Module& m, const config& cfg) {
  return std::make_unique<overlap_sync<Sync>>(t, m, cfg);
}
template <class Tr, class A>
std::unique_ptr<grad_sync> make_per_parameter(Tr& t, torch::nn::Module& m, const config& cfg) {
  return std::make_unique<per_parameter_sync<Tr, A>>(t, m, cfg);
}

/// The entries of algorithm A under --algo `name` (compressed ones with `compressed`).
template <class Tr, class A>
void add_algorithm(std::vector<dispatch_entry<Tr>>& v, const std::string& name, bool compressed) {
  namespace c = gradsync::compress;
  using arena = gradsync::fusion::zero_copy<(25u << 20)>;  // .grad views the arena
  using packed = gradsync::fusion::bucket<(25u << 20)>;    // powersgd: matrix shapes
  v.push_back({"per-parameter", name + "/none/none", &make_per_parameter<Tr, A>});
  v.push_back({"per-parameter", name + "/bucket/none", &make_per_parameter<Tr, A>});
  v.push_back({"overlap", name + "/none/none",
               &make_overlap<Tr, gradsync::allreducer<Tr, A, gradsync::fusion::none>>});
  v.push_back(
      {"overlap", name + "/bucket/none", &make_overlap<Tr, gradsync::allreducer<Tr, A, arena>>});
  if (!compressed) return;
  auto add = [&]<class F, class C>(const char* key) {
    v.push_back(
        {"overlap", name + "/bucket/" + key, &make_overlap<Tr, gradsync::allreducer<Tr, A, F, C>>});
  };
  add.template operator()<arena, c::fp16>("fp16");
  add.template operator()<arena, c::bf16>("bf16");
  add.template operator()<arena, c::int8<>>("int8");
  add.template operator()<arena, c::error_feedback<c::int8<>>>("int8+ef");
  add.template operator()<arena, c::topk<10>>("topk");
  add.template operator()<arena, c::error_feedback<c::topk<10>>>("topk+ef");
  add.template operator()<packed, c::error_feedback<c::powersgd<4>>>("powersgd+ef");
}

template <class Tr>
std::vector<dispatch_entry<Tr>> table() {
  std::vector<dispatch_entry<Tr>> v;
  if constexpr (gradsync::transport::is_two_level_v<Tr>) {
    add_algorithm<Tr, gradsync::algo::hierarchical<>>(v, "auto", true);
  } else {
    add_algorithm<Tr, gradsync::algo::ring>(v, "ring", false);
    add_algorithm<Tr, gradsync::algo::auto_select>(v, "auto", true);
  }
  return v;
}

/// Trains with the entry the flags name, or explains what this transport offers.
template <class Tr>
std::string dispatch(Tr& t, const run_context& ctx) {
  const auto entries = table<Tr>();
  const std::string key = composition_key(ctx.cfg);
  for (const auto& e : entries) {
    if (e.sync == ctx.cfg.sync && e.key == key) return train_rank<Tr>(t, ctx, e.make);
  }
  std::string have;
  for (const auto& e : entries) {
    if (e.sync == ctx.cfg.sync) have += "\n  " + e.key;
  }
  throw usage_error(
      "--sync " + ctx.cfg.sync + " with --algo/--fusion/--compress " + key +
      " is not available on this transport; available (algo/fusion/compress):" + have);
}

}  // namespace torch_trainer
