// Flags -> compile-time instantiations. For a transport Tr, table<Tr>() lists one entry
// per (--algo, --fusion) pair that composes with Tr, each pointing at
// train_rank<Tr, Algorithm, Fusion>. Adding a policy is one line in add_algorithms (or
// in the fusion list of add_algorithm); a pair that does not compose (algo::direct
// without peer access) is left out at compile time and refused at run time with the
// list of what this transport supports.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "config.hpp"
#include "train.hpp"

namespace mini_trainer {

/// One instantiation of the training loop for transport Tr.
template <class Tr>
struct dispatch_entry {
  std::string_view algo;    // --algo value
  std::string_view fusion;  // --fusion value
  std::string (*run)(Tr&, const run_context&);
};

/// Adds (name, fusion) entries for algorithm A if it composes with Tr.
template <class Tr, class A>
void add_algorithm(std::vector<dispatch_entry<Tr>>& t, std::string_view name) {
  if constexpr (gradsync::algorithm_for<A, Tr>) {
    t.push_back({name, "none", &train_rank<Tr, A, gradsync::fusion::none>});
  }
}

template <class Tr>
std::vector<dispatch_entry<Tr>> table() {
  std::vector<dispatch_entry<Tr>> t;
  add_algorithm<Tr, gradsync::algo::ring>(t, "ring");
  return t;
}

/// Runs the entry matching cfg.algo / cfg.fusion, or explains what exists.
template <class Tr>
std::string dispatch(Tr& t, const run_context& ctx) {
  const auto entries = table<Tr>();
  for (const auto& e : entries) {
    if (e.algo == ctx.cfg.algo && e.fusion == ctx.cfg.fusion) return e.run(t, ctx);
  }
  std::string have;
  for (const auto& e : entries) {
    have += "\n  --algo " + std::string(e.algo) + " --fusion " + std::string(e.fusion);
  }
  throw usage_error("--algo " + ctx.cfg.algo + " --fusion " + ctx.cfg.fusion +
                    " is not available with --transport " + std::string(Tr::name) +
                    " in this build; available:" + have);
}

}  // namespace mini_trainer
