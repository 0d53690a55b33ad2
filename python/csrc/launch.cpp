// SPDX-License-Identifier: Apache-2.0
// Which transport a process group gets, from how the job was launched:
//  - Open MPI's mpirun, or srun with PMIx, and the group is the whole job: MPI (started
//    here with MPI_THREAD_MULTIPLE unless already running). One host: shm (bootstrapped
//    over MPI); one rank per host, or hosts with unequal rank counts: mpi; several ranks on
//    each of several hosts: two_level<shm, mpi> with hierarchical<>.
//  - anything else (torchrun, mp.spawn, a sub-group): shm on one host, its job id agreed
//    through the c10d store; ranks on several hosts are refused on every rank.
// GRADSYNC_TORCH_TRANSPORT=shm|mpi|two_level overrides the choice under MPI (tests and
// benchmarks), GRADSYNC_TORCH_NODE_RANKS=K makes two_level nodes of K consecutive ranks.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gradsync/core/deadline.hpp>
#include <gradsync/core/error.hpp>
#include <gradsync/core/log.hpp>
#include <gradsync/transport/mpi/exit.hpp>
#include <gradsync/transport/mpi/node.hpp>
#include <gradsync/transport/shm/from_mpi.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

#include "engine.hpp"
#include "engines.hpp"

namespace gradsync_torch {

namespace {
using gradsync::errc;

// Process-wide, because MPI is: whether this extension called MPI_Init (then it also
// finalizes at exit), and whether any engine call failed (then it leaves the job's end
// to the launcher instead of a barrier that the failed peers may never reach).
std::atomic<bool> mpi_started_here{false};
std::atomic<bool> engine_failed{false};
// The longest timeout of the MPI-launched groups (seconds): how long the end of the job
// waits for ranks still tearing down (another framework's groups can take over 10 s).
std::atomic<double> end_of_job_grace_s{0.0};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

[[noreturn]] void fail(errc code, std::size_t rank, const std::string& what) {
  throw gradsync::error(code, {rank}, "torch backend 'gradsync': " + what);
}

enum class launcher { none, open_mpi, pmix, pmi };

launcher detect_launcher() {
  if (env("OMPI_COMM_WORLD_SIZE")) return launcher::open_mpi;
  if (env("PMIX_RANK") && env("SLURM_STEP_ID")) return launcher::pmix;  // srun --mpi=pmix
  if (env("PMI_SIZE") || env("PMI_RANK")) return launcher::pmi;         // Hydra, srun pmi2
  return launcher::none;
}

std::string transport_choice(std::size_t rank) {
  const char* v = env("GRADSYNC_TORCH_TRANSPORT");
  const std::string c = v ? v : "auto";
  if (c != "auto" && c != "shm" && c != "mpi" && c != "two_level") {
    fail(errc::invalid_argument, rank,
         "GRADSYNC_TORCH_TRANSPORT='" + c + "' is not one of auto, shm, mpi, two_level");
  }
  return c;
}

// Python loads extensions with RTLD_LOCAL; Open MPI's plugins, which it dlopens itself,
// then miss libmpi's symbols. Re-opening the loaded libmpi globally fixes that (as
// mpi4py does); the handle is kept for the life of the process.
void make_libmpi_global() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) && info.dli_fname) {
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  }
}

void ensure_mpi(std::size_t rank) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) fail(errc::invalid_argument, rank, "MPI was already finalized in this process");
  int provided = 0;
  if (!initialized) {
    make_libmpi_global();
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      fail(errc::transport, rank, "MPI_Init_thread failed");
    }
    mpi_started_here = true;
  } else {
    MPI_Query_thread(&provided);
  }
  // Every collective runs on the process group's worker thread, not the one that started
  // MPI: that needs MPI_THREAD_SERIALIZED at least.
  if (provided < MPI_THREAD_SERIALIZED) {
    fail(errc::invalid_argument, rank,
         "MPI runs at a thread level below MPI_THREAD_SERIALIZED (it was started before "
         "gradsync_torch, e.g. by mpi4py); start it with MPI_THREAD_MULTIPLE "
         "(mpi4py: mpi4py.rc.thread_level = 'multiple' before importing MPI)");
  }
}

// The whole job under MPI: the transport from where the ranks are.
std::unique_ptr<engine> open_mpi_engine(std::size_t rank, gradsync::seconds_d timeout,
                                        const std::string& choice) {
  ensure_mpi(rank);
  double grace = end_of_job_grace_s.load();  // raised to this group's timeout
  while (grace < timeout.count() &&
         !end_of_job_grace_s.compare_exchange_weak(grace, timeout.count())) {
  }
  int wr = 0, ws = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &ws);
  if (static_cast<std::size_t>(wr) != rank) {
    fail(errc::invalid_argument, rank,
         "torch.distributed gave this process rank " + std::to_string(rank) +
             " but MPI_COMM_WORLD says " + std::to_string(wr) +
             "; under mpirun pass rank=OMPI_COMM_WORLD_RANK (gradsync_torch sets RANK and "
             "WORLD_SIZE from Open MPI when they are unset)");
  }
  const auto until = gradsync::deadline::after(timeout);
  const auto places = gradsync::transport::detail::place_ranks(MPI_COMM_WORLD, until);
  std::map<int, std::size_t> per_host;  // by the lowest rank on the host
  for (const auto& p : places) ++per_host[p.leader];
  std::size_t most = 0, least = places.size();
  for (const auto& [leader, n] : per_host) {
    most = std::max(most, n);
    least = std::min(least, n);
  }
  // two_level numbers its ranks node by node; that is the job's numbering only when each
  // host holds a block of consecutive ranks (mpirun's default --map-by slot).
  bool blocks = least == most;
  for (std::size_t r = 0; blocks && r < places.size(); ++r) {
    blocks = static_cast<std::size_t>(places[r].leader) == r - r % most;
  }
  gradsync::transport::shm_options base;
  base.bootstrap_timeout = timeout;
  const std::size_t hosts = per_host.size();
  std::string pick = choice;
  if (pick == "auto") {
    pick = hosts == 1 ? "shm" : (most == 1 || !blocks) ? "mpi" : "two_level";
    if (hosts > 1 && most > 1 && !blocks) {
      gradsync::log(gradsync::log_level::warn, rank,
                    "torch backend: the hosts hold unequal or interleaved ranks; using flat "
                    "transport::mpi instead of two_level (place ranks in equal blocks, "
                    "mpirun --map-by slot, for the hierarchical path)");
    }
  }
  if (pick == "shm") {
    if (hosts > 1) {
      fail(errc::invalid_argument, rank,
           "GRADSYNC_TORCH_TRANSPORT=shm, but the job's ranks are on " + std::to_string(hosts) +
               " hosts; shared memory reaches one host only");
    }
    return make_engine(gradsync::transport::shm_from_mpi(MPI_COMM_WORLD, base));
  }
  if (pick == "mpi") return make_engine(gradsync::transport::mpi(MPI_COMM_WORLD));
  int color = -1;  // nodes: the shared-memory domains, or K consecutive ranks
  if (const char* k = env("GRADSYNC_TORCH_NODE_RANKS")) {
    char* end = nullptr;
    const long v = std::strtol(k, &end, 10);
    if (end == k || *end != '\0' || v < 1 || v > ws || ws % v != 0) {
      fail(errc::invalid_argument, rank,
           std::string("GRADSYNC_TORCH_NODE_RANKS='") + k + "' must divide the job's " +
               std::to_string(ws) + " ranks");
    }
    color = wr / static_cast<int>(v);
  } else if (!blocks) {
    fail(errc::invalid_argument, rank,
         "GRADSYNC_TORCH_TRANSPORT=two_level needs each host to hold an equal block of "
         "consecutive ranks (mpirun --map-by slot)");
  }
  auto t = gradsync::transport::two_level_from_mpi(MPI_COMM_WORLD, base, color);
  if (t.rank() != rank) {
    fail(errc::invalid_argument, rank,
         "two_level numbers this rank " + std::to_string(t.rank()) + ", not its job rank");
  }
  return make_engine(std::move(t));
}

// A value read from the store is checked before use (another process wrote it).
std::string checked(const std::string& v, const std::string& key, std::size_t max, bool id_chars,
                    std::size_t rank) {
  bool ok = !v.empty() && v.size() <= max;
  for (char ch : v) {
    const auto u = static_cast<unsigned char>(ch);
    ok = ok && (id_chars ? (std::isalnum(u) || ch == '-' || ch == '_') : (u >= 0x21 && u < 0x7f));
  }
  if (!ok) {
    fail(errc::invalid_argument, rank,
         "the store's key '" + key + "' holds an invalid value (" + std::to_string(v.size()) +
             " bytes); another job may share this store's address");
  }
  return v;
}

std::string this_host() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0 || !h[0]) return "unknown-host";
  return h;
}

// One host over shm, its job id and every rank's host name exchanged through the store.
std::unique_ptr<engine> open_store_engine(std::size_t rank, std::size_t size,
                                          gradsync::seconds_d timeout, const kv_store& store) {
  // The store outlives a destroyed and re-made group (same names): each making of the
  // group takes its own generation of keys from a shared counter.
  const std::int64_t ticket = store.add("gradsync/inits", 1);
  if (ticket < 1) fail(errc::invalid_argument, rank, "the store's counter gradsync/inits is < 1");
  const std::string gen = "gradsync/" + std::to_string((ticket - 1) / std::int64_t(size));
  const std::string host = this_host();
  store.set(gen + "/host/" + std::to_string(rank), host);
  if (rank == 0) {
    std::random_device rd;
    const std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd();
    char id[48];
    std::snprintf(id, sizeof id, "t%x-%016llx", static_cast<unsigned>(::getpid()),
                  static_cast<unsigned long long>(r));
    store.set(gen + "/job", id);
  }
  const std::string job = checked(store.get(gen + "/job"), gen + "/job", 40, true, rank);
  std::vector<std::string> hosts(size);
  std::size_t elsewhere = size;
  for (std::size_t q = 0; q < size; ++q) {
    const std::string key = gen + "/host/" + std::to_string(q);
    hosts[q] = checked(store.get(key), key, 255, false, rank);
    if (hosts[q] != hosts[0] && elsewhere == size) elsewhere = q;
  }
  if (elsewhere != size) {
    // Rank 0 serves the TCPStore under env:// and leaves last: its exit would cut off a
    // rank still talking to the store ("Broken pipe" instead of this message). The other
    // ranks make no store call after their count, so none waits on a store about to go.
    const std::string read = gen + "/hosts_read";
    if (rank == 0) {
      store.get(read + "/all");
    } else if (store.add(read, 1) == static_cast<std::int64_t>(size) - 1) {
      store.set(read + "/all", "1");
    }
    fail(errc::invalid_argument, rank,
         "rank 0 runs on host '" + hosts[0] + "' and rank " + std::to_string(elsewhere) + " on '" +
             hosts[elsewhere] +
             "'; launched without MPI (torchrun, mp.spawn, a c10d store) the backend runs "
             "over shared memory on one host only. Across hosts launch with Open MPI's "
             "mpirun or srun --mpi=pmix (MPI between hosts, shared memory inside each)");
  }
  gradsync::transport::shm_options o;
  o.rank = rank;
  o.size = size;
  o.job = job;
  o.host = host;
  o.bootstrap_timeout = timeout;
  return make_engine(gradsync::transport::shm(o));
}

}  // namespace

std::unique_ptr<engine> open_engine(std::size_t rank, std::size_t size, gradsync::seconds_d timeout,
                                    const kv_store& store) {
  const std::string choice = transport_choice(rank);
  const launcher l = detect_launcher();
  if (l == launcher::pmi) {
    fail(errc::invalid_argument, rank,
         "this process was started by a PMI launcher (PMI_SIZE is set: MPICH's mpiexec, or srun "
         "--mpi=pmi2), but gradsync_torch is built against Open MPI; launch with Open MPI's "
         "mpirun (mpirun.openmpi), srun --mpi=pmix, or torchrun on one host");
  }
  std::unique_ptr<engine> e;
  int ws = 0;
  if (l != launcher::none) {
    const char* n = env("OMPI_COMM_WORLD_SIZE");
    if (!n) n = env("SLURM_STEP_NUM_TASKS");
    ws = n ? std::atoi(n) : 0;
  }
  if (l != launcher::none && static_cast<std::size_t>(ws) == size) {
    e = open_mpi_engine(rank, timeout, choice);
  } else {
    // A sub-group of an MPI job, or no MPI at all: the store, on one host.
    if (choice != "auto" && choice != "shm") {
      fail(errc::invalid_argument, rank,
           "GRADSYNC_TORCH_TRANSPORT=" + choice +
               " needs a group of the whole job started by Open MPI's mpirun or srun "
               "--mpi=pmix; this group is " +
               std::to_string(size) + " ranks without MPI");
    }
    e = open_store_engine(rank, size, timeout, store);
  }
  gradsync::log(gradsync::log_level::info, rank, "torch backend: %s", e->describe().c_str());
  return e;
}

void note_failure() noexcept {
  engine_failed = true;
}

void finalize_mpi() noexcept {
  if (!mpi_started_here.exchange(false) || engine_failed) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A late rank gets as long as it would in a collective: the groups' timeout. Capped so
  // that the conversion to milliseconds cannot overflow (a year is as good as forever).
  const double grace_s = std::min(end_of_job_grace_s.load(), 365.0 * 24 * 3600);
  (void)gradsync::transport::finalize_job(
      0, grace_s > 0 ? std::chrono::milliseconds(static_cast<std::int64_t>(grace_s * 1000))
                     : std::chrono::milliseconds(std::chrono::seconds(10)));
}

}  // namespace gradsync_torch
