// SPDX-License-Identifier: Apache-2.0
// What a benchmark says about how it was built (bench/meson.build: -Dbench_optimization).
#pragma once

#include <cstdio>

namespace gradsync::bench {

/// A benchmark built below -O3 (-Dbench_optimization, as scripts/test builds them) says
/// so before its tables: its timings check that it runs, they are not measurements.
inline void print_build_note() {
#if defined(GRADSYNC_BENCH_OPT_LEVEL) && GRADSYNC_BENCH_OPT_LEVEL < 3
  std::printf(
      "# NOTE: built at -O%d (-Dbench_optimization=%d, as scripts/test builds it): these timings "
      "are not measurements; for figures: meson configure BUILD -Dbench_optimization=3 "
      "-Dunity=off\n",
      GRADSYNC_BENCH_OPT_LEVEL, GRADSYNC_BENCH_OPT_LEVEL);
#endif
}

}  // namespace gradsync::bench
