// SPDX-License-Identifier: Apache-2.0
// The headers most test programs include, precompiled once per optimisation level and
// force-included into them when configured with -Dtest_pch=auto (tests/meson.build).
// Only headers whose meaning no test's own macros change (not mpi.h: one per MPI), and
// none that defines objects (not doctest.h: its test-suite registration). No
// include guard: it is only ever the first header of a unit.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include <gradsync/algo/direct.hpp>
#include <gradsync/algo/native.hpp>
#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/shm.hpp>
