// SPDX-License-Identifier: Apache-2.0
// Feeds fuzz strings to GRADSYNC_TIMEOUT, GRADSYNC_STALL_WARN, an on/off flag and a
// call_options::timeout (core/deadline.hpp), and to the shm launch variables.
// Must hold: no crash or sanitizer report (no overflowing duration cast); a bad value is
// invalid_argument naming its variable; a good one is a usable deadline or rank < size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <gradsync/core/call.hpp>
#include <gradsync/core/deadline.hpp>
#include <gradsync/core/stall.hpp>
#include <gradsync/transport/shm/launch.hpp>

#include "fuzz_support.hpp"

namespace gs = gradsync;
namespace fz = gradsync::fuzz;

namespace {

// NAME=value in a buffer of our own, given to putenv once: setenv would keep a copy of
// every value it was ever given (glibc never frees them), millions over a long run.
template <std::size_t N>
struct env_slot {
  const char* name;
  char buf[N] = {};

  void set(const std::string& value, bool present) {
    ::unsetenv(name);
    if (!present) return;
    const std::string kv = std::string(name) + "=" + value.substr(0, N - std::strlen(name) - 2);
    std::memcpy(buf, kv.c_str(), kv.size() + 1);
    ::putenv(buf);
  }
};

env_slot<512> timeout_var{"GRADSYNC_TIMEOUT"}, stall_var{"GRADSYNC_STALL_WARN"};
env_slot<512> flag_var{"GRADSYNC_FUZZ_FLAG"}, zero_var{"GRADSYNC_FUZZ_SECONDS"};

bool names(const gs::error& e, std::string_view var) {
  return e.code() == gs::errc::invalid_argument &&
         std::string_view(e.what()).find(var) != std::string_view::npos;
}

// A deadline `s` from now, and a stall watch of it: neither may overflow.
void use(gs::seconds_d s) {
  const gs::deadline d = gs::deadline::after(s);
  if (s.count() >= 1e6) fz::require(!d.expired(), "a long timeout has not expired at once");
  gs::stall_watch w(s);
  w.enter(0, {});
  (void)w.due(gs::clock::now());
}

// The shm launch variables, each set or not, as shm_launch_from reads them.
// clang-format off
constexpr const char* shm_vars[] = {
    "GRADSYNC_SHM_JOB", "GRADSYNC_SHM_RANK", "GRADSYNC_SHM_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE",
    "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
    "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMI_SIZE",
    "SLURM_LOCALID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_JOB_ID",
    "SLURM_STEP_ID"};
// clang-format on
constexpr std::size_t shm_count = sizeof shm_vars / sizeof shm_vars[0];

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fz::byte_source in(data, size);
  const auto present = in.take<std::uint32_t>();  // bit i: string i is set
  timeout_var.set(in.str(), present & 1);
  stall_var.set(in.str(), present & 2);
  flag_var.set(in.str(), present & 4);
  zero_var.set(in.str(), present & 8);

  gs::seconds_d timeout{300};
  try {
    timeout = gs::read_timeout_env();
    fz::require(timeout.count() > 0, "a timeout is positive");
    use(timeout);
  } catch (const gs::error& e) {
    fz::require(names(e, "GRADSYNC_TIMEOUT"), "a bad timeout names GRADSYNC_TIMEOUT");
  }
  try {
    const gs::seconds_d s = gs::stall_threshold(timeout);
    fz::require(s.count() > 0, "a stall threshold is positive");
    use(s);
  } catch (const gs::error& e) {
    fz::require(names(e, "GRADSYNC_STALL_WARN"), "a bad threshold names GRADSYNC_STALL_WARN");
  }
  try {
    const gs::seconds_d s = gs::detail::env_seconds(zero_var.name, gs::seconds_d{7}, true);
    fz::require(s.count() >= 0, "seconds allowed to be zero are >= 0");
    use(s);
  } catch (const gs::error& e) {
    fz::require(names(e, zero_var.name), "a bad value names its variable");
  }
  try {
    const bool on = gs::detail::read_flag_env(flag_var.name);
    const char* v = std::getenv(flag_var.name);
    fz::require(on == (v && std::string_view(v) == "1"), "a flag is on exactly for 1");
  } catch (const gs::error& e) {
    fz::require(names(e, flag_var.name), "a bad flag names its variable");
  }
  // A timeout the caller passes (any double: NaN is refused, the rest saturate).
  try {
    const gs::call_options opt{.timeout = gs::seconds_d{in.take<double>()}};
    (void)opt.make_deadline();
  } catch (const gs::error& e) {
    fz::require(e.code() == gs::errc::invalid_argument, "a NaN timeout is invalid_argument");
  }

  std::string values[shm_count];
  const auto shm_present = in.take<std::uint16_t>();
  for (auto& v : values) v = in.str();
  auto getenv = [&](const char* var) -> const char* {
    for (std::size_t i = 0; i < shm_count; ++i) {
      if (std::strcmp(var, shm_vars[i]) == 0) {
        return (shm_present >> i) & 1 ? values[i].c_str() : nullptr;
      }
    }
    fz::require(false, "shm_launch_from reads only the variables it documents");
    return nullptr;
  };
  try {
    const auto l = gs::transport::detail::shm_launch_from(getenv, 0);
    fz::require(l.rank < l.size && !l.job.empty(), "a launch has rank < size and a job id");
  } catch (const gs::error& e) {
    fz::require(e.code() == gs::errc::invalid_argument, "a bad launch is invalid_argument");
  }
  return 0;
}
