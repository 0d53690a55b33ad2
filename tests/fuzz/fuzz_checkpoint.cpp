// SPDX-License-Identifier: Apache-2.0
// Feeds the mini_trainer's checkpoint reader (deserialize) the fuzz input as a file: as it
// is, and with its last 8 bytes set to the checksum of the rest (to reach the parser).
// Must hold: no crash or sanitizer report, no allocation past the file's size; a bad file is
// a usage_error naming it; a file that loads is written back by serialize() byte for byte.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint.hpp"
#include "fuzz_support.hpp"

namespace fz = gradsync::fuzz;
namespace mt = mini_trainer;

namespace {

const std::string path = "fuzz/ckpt-0000000001.bin";

void load(const std::vector<unsigned char>& bytes) {
  mt::train_state s;
  try {
    s = mt::deserialize(bytes, path);
  } catch (const mt::usage_error& e) {
    fz::require(std::string(e.what()).find(path) != std::string::npos, "the error names the file");
    return;
  }
  fz::require(mt::serialize(s) == bytes, "a checkpoint that loads is written back as it was");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<unsigned char> bytes(data, data + size);
  load(bytes);
  if (size >= 16) {
    const std::uint64_t sum = gradsync::testing::fnv1a64(bytes.data(), size - 8);
    std::memcpy(bytes.data() + size - 8, &sum, 8);
    load(bytes);
  }
  return 0;
}
