// SPDX-License-Identifier: Apache-2.0
// transport/shm/launch.hpp: where shm::from_env() takes rank, size and job from —
// GRADSYNC_SHM_*, else Open MPI's, MPICH Hydra's or Slurm's variables — and the refusal
// of a launcher job that spans several hosts. The environment is a map handed to
// detail::shm_launch_from, so no test touches the process's own environment except the
// last one (GRADSYNC_SHM_HEAP through shm_options::from_env).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>

#include <gradsync/transport/shm.hpp>
#include <gradsync/transport/shm/launch.hpp>

#include "text.hpp"

namespace gs = gradsync;
using gradsync::testbed::contains;

namespace {

using env_map = std::map<std::string, std::string>;

gs::transport::shm_launch launch(const env_map& env, pid_t parent = ::getpid()) {
  return gs::transport::detail::shm_launch_from(
      [&](const char* v) -> const char* {
        auto it = env.find(v);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      parent);
}

/// The message of the gs::error that launch(env) throws ("" if none).
std::string failure(const env_map& env, pid_t parent = ::getpid()) {
  try {
    (void)launch(env, parent);
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::invalid_argument);
    return e.what();
  }
  return "";
}

/// "source rank/size job", to compare a whole launch in one CHECK.
std::string describe(const gs::transport::shm_launch& l) {
  return l.source + " " + std::to_string(l.rank) + "/" + std::to_string(l.size) + " " + l.job;
}

const env_map open_mpi = {{"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                          {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"PMIX_NAMESPACE", "1234"}};
const env_map hydra = {{"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "3"}, {"PMI_SIZE", "3"}};
const env_map slurm = {{"SLURM_LOCALID", "1"},
                       {"SLURM_STEP_NUM_TASKS", "3"},
                       {"SLURM_STEP_NUM_NODES", "1"},
                       {"SLURM_JOB_ID", "77"},
                       {"SLURM_STEP_ID", "2"}};

env_map with(env_map base, const env_map& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

}  // namespace

TEST_CASE("shm_launch: GRADSYNC_SHM_* first, rank and size as a pair") {
  const env_map own = {
      {"GRADSYNC_SHM_RANK", "1"}, {"GRADSYNC_SHM_SIZE", "2"}, {"GRADSYNC_SHM_JOB", "j"}};
  CHECK(describe(launch(own)) == "GRADSYNC_SHM_* 1/2 j");

  // They win over a launcher's, and skip the several-hosts check (the user defines the group).
  CHECK(describe(launch(with(with(open_mpi, {{"OMPI_COMM_WORLD_SIZE", "8"}}), own))) ==
        "GRADSYNC_SHM_* 1/2 j");

  CHECK(contains(failure({{"GRADSYNC_SHM_RANK", "0"}, {"GRADSYNC_SHM_JOB", "j"}}),
                 "GRADSYNC_SHM_SIZE is unset while GRADSYNC_SHM_RANK is set"));
  CHECK(contains(failure(with(open_mpi, {{"GRADSYNC_SHM_SIZE", "2"}})),
                 "GRADSYNC_SHM_RANK is unset while GRADSYNC_SHM_SIZE is set"));
  CHECK(contains(failure(with(own, {{"GRADSYNC_SHM_RANK", "two"}})),
                 "GRADSYNC_SHM_RANK must be a non-negative integer, got 'two'"));
  CHECK(contains(failure(with(own, {{"GRADSYNC_SHM_RANK", "-1"}})), "got '-1'"));
  CHECK(contains(failure(with(own, {{"GRADSYNC_SHM_RANK", ""}})), "got ''"));
  CHECK(contains(failure(with(own, {{"GRADSYNC_SHM_SIZE", "99999999999999999999"}})),
                 "GRADSYNC_SHM_SIZE must be a non-negative integer"));
  CHECK(contains(failure(with(own, {{"GRADSYNC_SHM_SIZE", "4294967296"}})),
                 "GRADSYNC_SHM_SIZE must be a non-negative integer"));
  CHECK(contains(failure(with(own, {{"GRADSYNC_SHM_RANK", "2"}})),
                 "rank 2 is not below the group size 2"));
  const std::string no_job = failure({{"GRADSYNC_SHM_RANK", "0"}, {"GRADSYNC_SHM_SIZE", "2"}});
  CHECK(contains(no_job, "GRADSYNC_SHM_JOB is not set: give every process"));
  CHECK(contains(failure({}), "no launcher was recognized (Open MPI, MPICH Hydra, Slurm)"));
}

TEST_CASE("shm_launch: Open MPI's variables") {
  CHECK(describe(launch(open_mpi)) == "Open MPI 2/4 ompi-1234");

  env_map older = open_mpi;
  older.erase("PMIX_NAMESPACE");
  older["OMPI_MCA_ess_base_jobid"] = "99";
  CHECK(launch(older).job == "ompi-99");
  CHECK(launch(with(open_mpi, {{"GRADSYNC_SHM_JOB", "mine"}})).job == "mine");

  // 8 ranks, 4 on this host: refused, naming both counts and what to use instead.
  const std::string hosts = failure(with(open_mpi, {{"OMPI_COMM_WORLD_SIZE", "8"}}));
  CHECK(contains(hosts, "Open MPI runs 8 ranks, 4 of them on this host"));
  CHECK(contains(hosts, "transport::mpi"));
  CHECK(contains(failure(with(open_mpi, {{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}})),
                 "OMPI_COMM_WORLD_LOCAL_RANK must be a non-negative integer, got 'x'"));
  // Without the world size the several-hosts check could not run: not taken for a launch.
  env_map partial = open_mpi;
  partial.erase("OMPI_COMM_WORLD_SIZE");
  CHECK(contains(failure(partial), "no launcher was recognized"));
  // Inside a Slurm allocation mpirun's ranks inherit SLURM_*: Open MPI's variables win.
  CHECK(launch(with(open_mpi, slurm)).source == "Open MPI");
}

TEST_CASE("shm_launch: MPICH Hydra's variables, the job from the hydra_pmi_proxy parent") {
  // Not started by a proxy (the parent passed is this test process): no job id.
  const std::string no_job = failure(hydra);
  CHECK(contains(no_job, "GRADSYNC_SHM_JOB is not set and MPICH Hydra gives no job id"));
  CHECK(contains(no_job, "mpirun -genv GRADSYNC_SHM_JOB"));
  CHECK(describe(launch(with(hydra, {{"GRADSYNC_SHM_JOB", "h"}}))) == "MPICH Hydra 1/3 h");

  // A process named hydra_pmi_proxy as the parent: its pid is the job id.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t proxy = ::fork();
  REQUIRE(proxy >= 0);
  if (proxy == 0) {
    ::prctl(PR_SET_NAME, "hydra_pmi_proxy");
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  CHECK(describe(launch(hydra, proxy)) == "MPICH Hydra 1/3 hydra-" + std::to_string(proxy));
  CHECK(contains(failure(with(hydra, {{"PMI_SIZE", "6"}}), proxy),
                 "MPICH Hydra runs 6 ranks, 3 of them on this host"));
  ::kill(proxy, SIGKILL);
  ::waitpid(proxy, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("shm_launch: Slurm's variables, one node only") {
  CHECK(describe(launch(slurm)) == "Slurm 1/3 slurm-77.2");

  // A batch script's own process (an allocation's variables, no step's) is no launch:
  // it would wait for ranks that never come.
  env_map batch = slurm;
  batch.erase("SLURM_STEP_NUM_TASKS");
  batch.erase("SLURM_STEP_NUM_NODES");
  batch.erase("SLURM_STEP_ID");
  batch["SLURM_NTASKS"] = "2";
  batch["SLURM_NNODES"] = "1";
  CHECK(contains(failure(batch), "no launcher was recognized"));
  CHECK(contains(failure(with(slurm, {{"SLURM_STEP_NUM_TASKS", "99999999999999999999"}})),
                 "SLURM_STEP_NUM_TASKS must be a non-negative integer"));

  const std::string hosts = failure(with(slurm, {{"SLURM_STEP_NUM_NODES", "2"}}));
  CHECK(contains(hosts, "Slurm runs 3 ranks, not all of them on this host"));
  CHECK(contains(failure(with(slurm, {{"SLURM_LOCALID", "3"}})),
                 "rank 3 is not below the group size 3"));
}

TEST_CASE("shm_options::from_env: GRADSYNC_SHM_HEAP, and a byte count that overflows") {
  ::setenv("GRADSYNC_SHM_RANK", "0", 1);
  ::setenv("GRADSYNC_SHM_SIZE", "1", 1);
  ::setenv("GRADSYNC_SHM_JOB", "heap", 1);
  ::setenv("GRADSYNC_SHM_HEAP", "3M", 1);
  CHECK(gs::transport::shm_options::from_env().heap_bytes == (std::size_t{3} << 20));
  for (const char* bad : {"3MB", "M", "-1K", "99999999999999G", "99999999999999999999"}) {
    CAPTURE(bad);
    ::setenv("GRADSYNC_SHM_HEAP", bad, 1);
    try {
      (void)gs::transport::shm_options::from_env();
      FAIL("a malformed GRADSYNC_SHM_HEAP must throw");
    } catch (const gs::error& e) {
      CHECK(contains(e.what(), "GRADSYNC_SHM_HEAP must be a byte count"));
    }
  }
  for (const char* v :
       {"GRADSYNC_SHM_RANK", "GRADSYNC_SHM_SIZE", "GRADSYNC_SHM_JOB", "GRADSYNC_SHM_HEAP"})
    ::unsetenv(v);
}

TEST_CASE("shm: sizes whose segment would not fit in 64 bits are refused, not wrapped") {
  gs::transport::shm_options o;
  o.size = 2;
  o.job = "too-big";
  o.heap_bytes = std::size_t{1} << 63;  // "8589934592G": the layout's ranks * heap wraps
  try {
    gs::transport::shm t(o);
    FAIL("a 2^63-byte heap must be refused");
  } catch (const gs::error& e) {
    CHECK(e.code() == gs::errc::invalid_argument);
    CHECK(contains(e.what(), "shm sizes too large"));
  }
  o.heap_bytes = 0;
  o.size = std::size_t{1} << 32;  // ranks * ranks rings wrap
  o.ring_bytes = std::size_t{1} << 20;
  CHECK_THROWS_WITH_AS((void)gs::transport::shm{o}, doctest::Contains("shm sizes too large"),
                       gs::error);
}
