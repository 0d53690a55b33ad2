// SPDX-License-Identifier: Apache-2.0
// allreduce_perf: nccl-tests-style sweep of gradsync's transports x algorithms, measured
// in the same run as the peers a user would pick instead (MPI_Allreduce, Gloo) and a
// STREAM-like probe that gives the memory-bound limit. See docs/performance.md.
//
//   allreduce_perf --ranks 2 --transport local --peers gloo,stream      (threads as ranks)
//   mpirun -np 2 allreduce_perf_openmpi --transport shm,mpi --peers all (processes)
#ifdef GRADSYNC_BENCH_MPI
#include <mpi.h>

#include "gradsync/transport/mpi/exit.hpp"
#endif

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <string>

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>

#include "gradsync/transport/local/run.hpp"
#include "rows.hpp"
#include "options.hpp"
#include "peer_gloo.hpp"
#include "peer_stream.hpp"
#ifdef GRADSYNC_BENCH_MPI
#include "../common/mpi_group.hpp"
#include "peer_mpi.hpp"
#endif

#ifndef GRADSYNC_BENCH_MPI_NAME
#define GRADSYNC_BENCH_MPI_NAME "none"
#endif

namespace gs = gradsync;
namespace gb = gradsync::bench;

namespace {

const std::string mpi_name = GRADSYNC_BENCH_MPI_NAME;

void print_banner(const gb::options& o, std::size_t ranks, const char* mode) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  std::printf("# allreduce_perf (gradsync %s)  %s  host %s  %s\n", GRADSYNC_VERSION_STRING, when,
              host, mode);
  gb::print_build_note();
  std::printf(
      "# ranks %zu  type %s  op %s  sizes %zu..%zu x%g  iters %zu (iter-bytes %zu)  "
      "warmup %zu  check %d  agree %d  verify %d\n",
      ranks, gb::type_label(o.type).c_str(), std::string(gs::op_name(o.op)).c_str(), o.min_bytes,
      o.max_bytes, o.factor, o.iters, o.iter_bytes, o.warmup, o.check ? 1 : 0, o.agree ? 1 : 0,
      o.verify ? 1 : 0);
  if (o.net_msg != gb::net_msg_auto) {
    std::printf("# network_message_bytes %zu (given)\n", o.net_msg);
  }
  std::printf(
      "# time: median over iterations of the slowest rank's time; min: fastest "
      "iteration; busbw = algbw * 2(n-1)/n\n");
  std::fflush(stdout);
}

/// 1 if any checked element was wrong, 4 if fewer gradsync tables ran than required.
int exit_status(const gb::options& o, std::uint64_t wrong, std::size_t tables,
                std::size_t checked) {
  if (o.corrupt) {  // self-test: exactly one spoiled element per checked gradsync row
    const bool ok = checked > 0 && wrong == checked;
    std::fprintf(stderr,
                 "allreduce_perf: self-test: %llu wrong element(s) counted in %zu "
                 "checked row(s) with one spoiled element each: %s\n",
                 static_cast<unsigned long long>(wrong), checked, ok ? "detected" : "MISSED");
    return ok ? 0 : 1;  // success means: the check caught every spoiled element
  }
  if (wrong) {
    std::fprintf(stderr, "allreduce_perf: %llu wrong element(s) in checked rows\n",
                 static_cast<unsigned long long>(wrong));
    return 1;
  }
  if (tables < o.require_gradsync) {
    std::fprintf(stderr, "allreduce_perf: only %zu gradsync table(s) ran, %zu required\n", tables,
                 o.require_gradsync);
    return 4;
  }
  return 0;
}

/// Ranks are threads of this process: the local transport, Gloo over loopback, STREAM.
int run_threads(const gb::options& o) {
  auto st = gb::thread_group::make_state(o.ranks);
  gloo::rendezvous::HashStore store;
  gb::csv_writer csv(o.csv);
  std::atomic<std::uint64_t> wrong{0};
  std::atomic<std::size_t> tables{0}, checked{0};
  const auto transports = o.transports.empty() ? std::vector<std::string>{"local"} : o.transports;
  print_banner(o, o.ranks, "in-process ranks (threads)");
  if (o.interleave) {
    std::printf("#\n# --interleave pairs tables with MPI_Allreduce: run under mpirun; ignored\n");
  }
  gs::transport::run_local(o.ranks, [&](gs::transport::local& t) {
    gb::thread_group g(st, t.rank());
    try {
      for (const auto& tr : transports) {
        if (tr == "local") {
#ifdef GRADSYNC_BENCH_MPI
          // Kept out of the MPI binaries (compile time): the plain allreduce_perf runs it.
          if (g.rank() == 0) {
            std::printf("#\n# transport=local: run the allreduce_perf binary (without MPI)\n");
          }
#else
          const gb::gradsync_totals tot = gb::run_local_rows(t, g, o, csv, mpi_name);
          if (g.rank() == 0) wrong += tot.wrong, tables += tot.tables, checked += tot.checked;
#endif
        } else if (tr != "none" && g.rank() == 0) {
          std::printf(
              "#\n# transport=%s needs processes: run under mpirun with more than one "
              "rank; skipped\n",
              tr.c_str());
        }
      }
      for (const auto& p : o.peers) {
        if (p == "gloo") {
          const std::uint64_t w = gb::run_gloo_peer(g, store, o, csv, mpi_name);
          if (g.rank() == 0) wrong += w;
        } else if (p == "stream") {
          gb::run_stream_probe(g, o, csv, mpi_name);
        } else if (p == "mpi" && g.rank() == 0) {
          std::printf("#\n# peer mpi needs processes: run under mpirun; skipped\n");
        }
      }
    } catch (...) {
      st->sync.arrive_and_drop();  // peers waiting in a barrier must not hang
      throw;
    }
  });
  return exit_status(o, wrong.load(), tables.load(), checked.load());
}

#ifdef GRADSYNC_BENCH_MPI
/// Ranks are the processes of MPI_COMM_WORLD: shm and mpi transports, MPI_Allreduce,
/// Gloo over loopback (rendezvous through a FileStore), STREAM.
int run_processes(const gb::options& o) {
  gb::mpi_group g(MPI_COMM_WORLD);
  gb::csv_writer csv(g.rank() == 0 ? o.csv : std::string{});
  std::uint64_t wrong = 0;
  gb::gradsync_totals tot;
  const auto transports =
      o.transports.empty() ? std::vector<std::string>{"shm", "mpi"} : o.transports;
  if (g.rank() == 0) {
    print_banner(o, g.size(), "processes (MPI_COMM_WORLD)");
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string first(lib, static_cast<std::size_t>(len));
    first = first.substr(0, first.find('\n'));
    std::printf("# MPI: %s\n", first.c_str());
  }
  auto note = [&](const std::string& what) {
    if (g.rank() == 0) std::printf("#\n# %s\n", what.c_str());
  };
  for (const auto& tr : transports) {
    if (tr == "shm" || tr == "shm_reg") {
      tot += gb::run_shm_rows(MPI_COMM_WORLD, g, o, csv, mpi_name, tr == "shm_reg");
    } else if (tr == "mpi") {
      tot += gb::run_mpi_rows(MPI_COMM_WORLD, g, o, csv, mpi_name);
    } else if (tr == "two_level") {
      tot += gb::run_two_level_rows(MPI_COMM_WORLD, g, o, csv, mpi_name);
    } else if (tr == "local") {
      note("transport=local runs threads as ranks: run without mpirun (--ranks N); skipped");
    }
  }
  for (const auto& p : o.peers) {
    if (p == "mpi") {
      wrong += gb::run_mpi_peer(g, o, csv, mpi_name);
    } else if (p == "gloo") {
      std::string dir;
      if (g.rank() == 0) {
        char tmpl[] = "/tmp/allreduce_perf_gloo.XXXXXX";
        if (mkdtemp(tmpl)) dir = tmpl;
      }
      dir = g.broadcast(dir);
      if (dir.empty()) throw std::runtime_error("cannot create a directory for Gloo's FileStore");
      {
        gloo::rendezvous::FileStore store(dir);
        wrong += gb::run_gloo_peer(g, store, o, csv, mpi_name);
        g.barrier();
      }
      if (g.rank() == 0) std::filesystem::remove_all(dir);
    } else if (p == "stream") {
      gb::run_stream_probe(g, o, csv, mpi_name);
    }
  }
  return exit_status(o, wrong + tot.wrong, tot.tables, tot.checked);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  gb::options o;
  try {
    o = gb::parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_perf: %s (allreduce_perf --help lists the options)\n",
                 e.what());
    return 2;
  }
  if (o.help) {
    std::fputs(gb::usage_text(), stdout);
    return 0;
  }
  if (o.version) {
    std::printf("allreduce_perf (gradsync %s)\n", GRADSYNC_VERSION_STRING);
    return 0;
  }
#ifdef GRADSYNC_BENCH_MPI
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int status = 0;
  try {
    status = world > 1 ? run_processes(o) : run_threads(o);
  } catch (const std::exception& e) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    std::fprintf(stderr, "allreduce_perf: rank %d: %s\n", r, e.what());
    gs::transport::abort_job(MPI_COMM_WORLD, 3);
  }
  return gs::transport::finalize_job(status);
#else
  try {
    return run_threads(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_perf: %s\n", e.what());
    return 3;
  }
#endif
}
