// SPDX-License-Identifier: Apache-2.0
// The machine-readable lines both trainers print (the CPU mini_trainer and
// examples/cuda_trainer): tests and bench/gpu_check.sh compare them across runs.
#pragma once

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace mini_trainer {

inline std::string hex64(std::uint64_t h) {
  char b[20];
  std::snprintf(b, sizeof b, "%016" PRIx64, h);
  return b;
}

/// "final epoch=E test_acc=A loss=L weights_fnv64=H" (accuracy and loss < 0: none yet).
inline std::string final_line(std::size_t epoch, double test_acc, double loss,
                              std::uint64_t weights_fnv64) {
  char line[160];
  std::snprintf(line, sizeof line, "final epoch=%zu test_acc=%.4f loss=%.4f weights_fnv64=%s",
                epoch, test_acc < 0 ? 0.0 : test_acc, loss < 0 ? 0.0 : loss,
                hex64(weights_fnv64).c_str());
  return line;
}

/// The error text of a replica check `when` ("after epoch 2", ...) from every rank's
/// weights hash, naming the ranks that differ from rank 0 and every hash; "" when all agree.
inline std::string replica_mismatch(const std::vector<std::uint64_t>& hashes,
                                    const std::string& when) {
  std::string bad, detail;
  for (std::size_t q = 1; q < hashes.size(); ++q) {
    if (hashes[q] != hashes[0]) bad += (bad.empty() ? "" : ", ") + std::to_string(q);
  }
  if (bad.empty()) return {};
  for (std::size_t q = 0; q < hashes.size(); ++q) {
    detail += "\n  rank " + std::to_string(q) + ": weights_fnv64=" + hex64(hashes[q]);
  }
  return "replica check " + when + " failed: the weights of rank(s) " + bad +
         " differ from rank 0's; training stopped" + detail;
}

/// "grad step=S fnv64=H": the synced gradient of global step S (--print-grad-hash).
inline void print_grad_hash(std::size_t step, std::uint64_t fnv64) {
  std::printf("grad step=%zu fnv64=%s\n", step, hex64(fnv64).c_str());
  std::fflush(stdout);
}

}  // namespace mini_trainer
