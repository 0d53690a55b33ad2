// SPDX-License-Identifier: Apache-2.0
// Feeds the mini_trainer's checkpoint-name parser (detail::parse_ckpt_name, which --resume
// and the pruning of old checkpoints run on every name in the directory) a fuzz file name.
// Must hold: no crash or sanitizer report and no exception (a name that is not a
// checkpoint's is skipped); a name it takes is ckpt-<digits>.bin and its step is the number.
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint.hpp"
#include "fuzz_support.hpp"

namespace fz = gradsync::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string name(reinterpret_cast<const char*>(data), size);
  std::uint64_t step = 0;
  if (!mini_trainer::detail::parse_ckpt_name(name, step)) return 0;
  fz::require(name.size() >= 10 && name.rfind("ckpt-", 0) == 0 &&
                  name.compare(name.size() - 4, 4, ".bin") == 0,
              "a checkpoint's name is ckpt-<digits>.bin");
  const std::string digits = name.substr(5, name.size() - 9);
  fz::require(digits.find_first_not_of("0123456789") == std::string::npos, "digits only");
  std::uint64_t want = 0;
  for (const char c : digits) want = want * 10 + static_cast<std::uint64_t>(c - '0');
  fz::require(step == want, "the step is the number in the name");
  return 0;
}
