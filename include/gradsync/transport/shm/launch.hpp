// SPDX-License-Identifier: Apache-2.0
// Where transport::shm::from_env() finds its rank, group size and job id.
//
// In this order:
//   1. GRADSYNC_SHM_RANK / GRADSYNC_SHM_SIZE / GRADSYNC_SHM_JOB, set by hand or by a script;
//      rank and size come as a pair (one without the other is an error).
//   2. The launcher's own variables, so `mpirun -n 4 ./app` or `srun -n 4 ./app` needs
//      nothing else:
//        Open MPI     OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE / _SIZE, job
//                     PMIX_NAMESPACE (or OMPI_MCA_ess_base_jobid)
//        MPICH Hydra  MPI_LOCALRANKID / MPI_LOCALNRANKS / PMI_SIZE, job: the pid of the
//                     hydra_pmi_proxy that started this process (its parent)
//        Slurm srun   SLURM_LOCALID / SLURM_STEP_NUM_TASKS (one node:
//                     SLURM_STEP_NUM_NODES), job SLURM_JOB_ID.SLURM_STEP_ID
//      Each launcher counts only with all of its variables set (world size included).
//      A GRADSYNC_SHM_JOB that is set still names the job.
//
// transport::shm joins the processes of ONE host. A launcher's job that spans several
// hosts would form one group per host, and each group would reduce only its own
// host's gradients: silently wrong sums. So a job whose world size differs from its
// local size is refused (errc::invalid_argument naming both); across hosts use
// transport::mpi, or two_level_from_mpi (shm per host, mpi across, algo::hierarchical).
// Setting GRADSYNC_SHM_RANK / _SIZE by hand skips this check: the group is then yours
// to define.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gradsync/core/error.hpp"

namespace gradsync::transport {

/// A shm group member's place, and where it was read from.
struct shm_launch {
  std::size_t rank = 0;  ///< this process's rank in the host's group
  std::size_t size = 1;  ///< processes in the group
  std::string job;       ///< id shared by the group, unique per job
  std::string source;    ///< "GRADSYNC_SHM_*", "Open MPI", "MPICH Hydra" or "Slurm"
};

namespace detail {

/// Reads the non-negative integer in `var` (a rank or a count, at most 2^31) into `out`:
/// false when unset, throws when malformed.
template <class Getenv>
bool env_index(Getenv&& getenv, const char* var, std::size_t& out) {
  const char* s = getenv(var);
  if (!s) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (*s < '0' || *s > '9' || *end != '\0' || errno == ERANGE || v > (1ull << 31)) {
    throw error(errc::invalid_argument, {},
                std::string(var) + " must be a non-negative integer, got '" + s + "'");
  }
  out = static_cast<std::size_t>(v);
  return true;
}

/// The name of process `pid`'s executable (/proc/<pid>/comm), "" if unreadable.
inline std::string process_name(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(f, name);
  return name;
}

/// One launcher's answer: rank, local size, world size and job id (empty: none).
struct launcher_fields {
  const char* name;
  std::size_t rank = 0, size = 0, world = 0;
  std::string job;
};

/// What the launchers set, first match wins (Open MPI and Hydra before Slurm: their
/// ranks may run inside a Slurm allocation and inherit its variables).
template <class Getenv>
bool detect_launcher(Getenv&& getenv, pid_t parent, launcher_fields& f) {
  auto str = [&](const char* var) {
    const char* s = getenv(var);
    return s ? std::string(s) : std::string();
  };
  // Each launcher's rank, local size and world size must all be there (launchers set
  // them together); a partial set is not taken for a launch.
  std::size_t rank = 0, size = 0, world = 0;
  if (env_index(getenv, "OMPI_COMM_WORLD_LOCAL_RANK", rank) &&
      env_index(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE", size) &&
      env_index(getenv, "OMPI_COMM_WORLD_SIZE", world)) {
    f = {"Open MPI", rank, size, world, str("PMIX_NAMESPACE")};
    if (f.job.empty()) f.job = str("OMPI_MCA_ess_base_jobid");
    if (!f.job.empty()) f.job = "ompi-" + f.job;
    return true;
  }
  if (env_index(getenv, "MPI_LOCALRANKID", rank) && env_index(getenv, "MPI_LOCALNRANKS", size) &&
      env_index(getenv, "PMI_SIZE", world)) {
    f = {"MPICH Hydra", rank, size, world, {}};
    if (process_name(parent) == "hydra_pmi_proxy") f.job = "hydra-" + std::to_string(parent);
    return true;
  }
  // A job step started by srun (a batch script's own process has no step task count).
  std::size_t nodes = 0;
  if (env_index(getenv, "SLURM_LOCALID", rank) &&
      env_index(getenv, "SLURM_STEP_NUM_TASKS", world) &&
      env_index(getenv, "SLURM_STEP_NUM_NODES", nodes)) {
    // One node: every task is local. Several: the local size is not needed, the job is
    // refused below (world != size).
    f = {"Slurm", rank, nodes == 1 ? world : 0, world, {}};
    const std::string id = str("SLURM_JOB_ID"), step = str("SLURM_STEP_ID");
    if (!id.empty()) f.job = "slurm-" + id + "." + (step.empty() ? "0" : step);
    return true;
  }
  return false;
}

/// shm_launch from the variables `getenv` returns; `parent` is this process's parent pid.
template <class Getenv>
shm_launch shm_launch_from(Getenv&& getenv, pid_t parent) {
  shm_launch l;
  const char* job = getenv("GRADSYNC_SHM_JOB");
  const bool has_rank = getenv("GRADSYNC_SHM_RANK") != nullptr;
  const bool has_size = getenv("GRADSYNC_SHM_SIZE") != nullptr;
  if (has_rank || has_size) {
    if (!has_rank || !has_size) {
      throw error(errc::invalid_argument, {},
                  std::string(has_rank ? "GRADSYNC_SHM_SIZE" : "GRADSYNC_SHM_RANK") +
                      " is unset while " + (has_rank ? "GRADSYNC_SHM_RANK" : "GRADSYNC_SHM_SIZE") +
                      " is set: give both (or neither, to take them from the launcher)");
    }
    env_index(getenv, "GRADSYNC_SHM_RANK", l.rank);
    env_index(getenv, "GRADSYNC_SHM_SIZE", l.size);
    l.source = "GRADSYNC_SHM_*";
  } else {
    launcher_fields f{"none", 0, 0, 0, {}};
    if (!detect_launcher(getenv, parent, f)) {
      throw error(errc::invalid_argument, {},
                  "transport::shm::from_env: GRADSYNC_SHM_RANK and GRADSYNC_SHM_SIZE are unset "
                  "and no launcher was recognized (Open MPI, MPICH Hydra, Slurm): set "
                  "GRADSYNC_SHM_RANK, GRADSYNC_SHM_SIZE and GRADSYNC_SHM_JOB");
    }
    if (f.world != f.size) {
      throw error(errc::invalid_argument, {},
                  std::string(f.name) + " runs " + std::to_string(f.world) + " ranks, " +
                      (f.size ? std::to_string(f.size) : std::string("not all")) +
                      " of them on this host: transport::shm joins the processes of one host "
                      "only, and per-host groups would each reduce their own host's data. "
                      "Use transport::mpi across hosts (or set GRADSYNC_SHM_RANK / _SIZE to "
                      "define the group yourself)");
    }
    l.rank = f.rank;
    l.size = f.size;
    l.job = f.job;
    l.source = f.name;
  }
  if (job && *job) l.job = job;
  if (l.job.empty()) {
    throw error(errc::invalid_argument, {},
                "GRADSYNC_SHM_JOB is not set" +
                    (l.source == "GRADSYNC_SHM_*"
                         ? std::string()
                         : " and " + l.source + " gives no job id this process can see") +
                    ": give every process of the job the same id (e.g. the launcher's pid or "
                    "$SLURM_JOB_ID; with MPICH: mpirun -genv GRADSYNC_SHM_JOB $$ ...)");
  }
  if (l.size == 0 || l.rank >= l.size) {
    throw error(errc::invalid_argument, {},
                "shm group from " + l.source + ": rank " + std::to_string(l.rank) +
                    " is not below the group size " + std::to_string(l.size));
  }
  return l;
}

}  // namespace detail

/// This process's shm group from the environment (see the top of this file).
inline shm_launch shm_launch_from_env() {
  return detail::shm_launch_from([](const char* v) { return std::getenv(v); }, ::getppid());
}

}  // namespace gradsync::transport
