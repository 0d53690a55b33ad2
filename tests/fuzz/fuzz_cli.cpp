// SPDX-License-Identifier: Apache-2.0
// Feeds the mini_trainer's flag parser (parse_args, and what main() derives from its
// result) an argv split from the fuzz input at NUL bytes, up to 64 arguments.
// Must hold: no crash or sanitizer report; a bad flag is a usage_error (parse_args
// throws, never exits); a config it returns passes every check its documentation states.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"
#include "fuzz_support.hpp"

namespace fz = gradsync::fuzz;
namespace mt = mini_trainer;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fz::byte_source in(data, size);
  std::vector<std::string> args{"mini_trainer"};
  while (in.left() && args.size() < 65) args.push_back(in.str());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  mt::config c;
  try {
    c = mt::parse_args(static_cast<int>(args.size()), argv.data());
  } catch (const mt::usage_error&) {
    return 0;
  }
  if (c.help || c.version) return 0;  // printed and left before the checks
  fz::require(c.batch > 0 && c.ranks > 0 && c.epochs > 0, "counts are positive");
  fz::require(c.ranks <= mt::detail::max_ranks && c.node_ranks <= mt::detail::max_ranks,
              "rank counts fit an int");
  fz::require(c.fusion == "none" || c.fusion == "bucket", "a known fusion");
  fz::require(c.bucket_mb >= 1.0 / 1024 && c.bucket_mb <= 65536, "a bucket size in range");
  fz::require(mt::detail::param_count(c.hidden) <= mt::detail::max_params, "a model that fits");
  fz::require(!c.hidden.empty(), "at least one hidden layer");
  for (std::size_t w : c.hidden) fz::require(w > 0, "hidden widths are positive");
  fz::require(c.compress == "none" || c.fusion == "bucket", "compression needs buckets");
  fz::require(c.topk_permille == 1 || c.topk_permille == 10, "a compiled top-k");
  fz::require(c.powersgd_rank == 1 || c.powersgd_rank == 4, "a compiled PowerSGD rank");
  fz::require(!c.resume || !c.checkpoint_dir.empty(), "--resume has a directory");
  fz::require(c.inject_divergence < static_cast<long>(mt::detail::max_ranks), "a rank number");
  fz::require(c.throttle_ms <= 86'400'000, "a throttle of at most a day");
  fz::require(!c.exact_grads || (mt::detail::is_pow2(c.batch) && c.batch <= 512),
              "exact mode's batch");
  // What main() does next with it.
  const std::string key = mt::compress_key(c);
  fz::require(!key.empty(), "a dispatch key");
  try {
    const std::size_t steps = mt::checked_steps_per_epoch(c, c.ranks, 60000);
    fz::require(steps > 0 && steps * c.batch <= 60000, "whole batches of the training set");
  } catch (const mt::usage_error&) {
  }
  return 0;
}
