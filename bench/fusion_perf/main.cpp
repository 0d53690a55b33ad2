// SPDX-License-Identifier: Apache-2.0
// fusion_perf: what tensor fusion and overlap buy on real models' gradient lists.
//
//   fusion_perf [--ranks 2] [--reps 7] [--reps-small 21] [--models small,resnet50,bert]
//               [--bert-layers 12]
//               [--ratios 1,2] [--no-overlap] [--timeline PREFIX] [--progress-nice N]
//   mpirun -n 2 fusion_perf_openmpi --transport shm,mpi ...
//
// Rows: median (and min) over reps of the slowest rank's step time; "vs" is the unfused
// time divided by the row's time (model rows) or the step time divided by
// max(compute, comm) (overlap rows; the target is <= 1.15). Every mode's result is
// checked once against exactly representable inputs (#wrong). Exit status 1 if any
// #wrong is non-zero.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gradsync/gradsync.hpp>

#include "../common/group.hpp"
#include "../common/build_note.hpp"
#include "measure.hpp"
#include "models.hpp"

#if GRADSYNC_BENCH_MPI
#include <mpi.h>

#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/mpi/exit.hpp>
#include <gradsync/transport/shm/from_mpi.hpp>

#include "../common/mpi_group.hpp"
#endif

namespace gs = gradsync;
namespace gb = gradsync::bench;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) {
    if (!x.empty()) out.push_back(x);
  }
  return out;
}

const char* usage_text() {
  return "usage: fusion_perf [options]            (MPI builds: mpirun -n N fusion_perf_<mpi>)\n"
         "  --ranks N            in-process ranks (local transport), default 2\n"
         "  --reps N             timed repetitions per model row, default 7\n"
         "  --reps-small N       repetitions of models under 64 MiB, default 21\n"
         "  --warmup N           untimed repetitions first, default 2\n"
         "  --models LIST        small,resnet50,bert (default all three)\n"
         "  --bert-layers N      encoder layers of the bert model, default 12\n"
         "  --ratios LIST        overlap rows: compute time / comm time, default 1,2\n"
         "  --no-overlap         skip the overlap rows\n"
         "  --transport LIST     local (plain build); shm,mpi (MPI builds)\n"
         "  --timeline PREFIX    write timelines of the overlap runs under PREFIX\n"
         "  --progress-nice N    nice value of the allreducer's progress thread\n"
         "  -h, --help, --version  print this text, or the version, and exit 0\n"
         "Exit status: 0, 1 if any mode's #wrong is non-zero, 2 on a usage error.\n";
}

[[noreturn]] void usage_exit(const std::string& why) {
  std::fprintf(stderr, "fusion_perf: %s (fusion_perf --help lists the options)\n", why.c_str());
  std::exit(2);
}

gb::perf_options parse(int argc, char** argv) {
  gb::perf_options o;
#if GRADSYNC_BENCH_MPI
  o.transports = {"shm", "mpi"};
#else
  o.transports = {"local"};
#endif
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage_exit(a + " needs a value");
      return argv[++i];
    };
    // Numbers: the whole value must parse, else exit 2 naming the flag.
    auto number = [&](auto parse) {
      const std::string v = next();
      std::size_t used = 0;
      try {
        const auto x = parse(v, &used);
        if (used == v.size()) return x;
      } catch (const std::exception&) {
      }
      usage_exit(a + " needs a number, got '" + v + "'");
    };
    auto to_size = [](const std::string& v, std::size_t* used) {
      if (!v.empty() && v[0] == '-') throw std::invalid_argument("negative");
      return std::stoul(v, used);
    };
    auto to_int = [](const std::string& v, std::size_t* used) { return std::stoi(v, used); };
    auto to_double = [](const std::string& v, std::size_t* used) { return std::stod(v, used); };
    if (a == "-h" || a == "--help") {
      std::fputs(usage_text(), stdout);
      std::exit(0);
    } else if (a == "--version") {
      std::printf("fusion_perf (gradsync %s)\n", GRADSYNC_VERSION_STRING);
      std::exit(0);
    } else if (a == "--ranks") {
      o.ranks = number(to_size);
    } else if (a == "--reps") {
      o.reps = number(to_int);
    } else if (a == "--reps-small") {
      o.reps_small = number(to_int);
    } else if (a == "--warmup") {
      o.warmup = number(to_int);
    } else if (a == "--models") {
      o.models = split(next());
    } else if (a == "--bert-layers") {
      o.bert_layers = number(to_size);
    } else if (a == "--ratios") {
      o.compute_ratios.clear();
      for (const auto& r : split(next())) {
        std::size_t used = 0;
        double x = 0;
        try {
          x = to_double(r, &used);
        } catch (const std::exception&) {
        }
        if (used != r.size() || used == 0) usage_exit("--ratios needs numbers, got '" + r + "'");
        o.compute_ratios.push_back(x);
      }
    } else if (a == "--no-overlap") {
      o.overlap = false;
    } else if (a == "--transport") {
      o.transports = split(next());
    } else if (a == "--timeline") {
      o.timeline = next();
    } else if (a == "--progress-nice") {
      o.progress_nice = number(to_int);
    } else {
      usage_exit("unknown option '" + a + "'");
    }
  }
  if (o.reps < 1) o.reps = 1;
  return o;
}

gb::model model_named(const std::string& name, const gb::perf_options& o) {
  if (name == "resnet50") return gb::resnet50();
  if (name == "bert") return gb::bert_base(o.bert_layers);
  if (name == "small") return gb::small_tensors(1000);
  usage_exit("unknown model '" + name + "' (small, resnet50, bert)");
}

/// Moves a buffer to the next rank over a raw channel (a floor row of run_pair).
using exchange_fn = std::function<void(std::span<const float>, std::span<float>)>;

template <class Tr>
void run_transport(Tr& t, gb::group& g, const gb::perf_options& o, const std::string& name,
                   std::vector<gb::row>& rows, const std::string& exchange_name = "",
                   exchange_fn exchange = {}) {
  gb::fusion_bench<Tr> b(t, g, o, name);
  if (exchange) b.set_exchange(exchange_name, std::move(exchange));
  for (const auto& m : o.models) {
    const gb::model mo = model_named(m, o);
    b.run_model(mo, rows);
    if (mo.name == "1000x4KiB") b.run_pair(mo, rows);  // the 10x target, timed fairly
  }
  if (o.overlap) {
    const auto m = gb::resnet50();
    for (bool busy : {true, false}) {
      for (double r : o.compute_ratios) b.run_overlap(m, r, busy, rows);
    }
  }
}

int report(const std::vector<gb::row>& rows, const gb::perf_options& o, std::size_t ranks) {
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf(
      "# fusion_perf: %zu ranks, algo::auto_select, op avg, float32, median of %d (%d for models "
      "< 64 MiB; after %d warm-up) of the slowest rank, progress thread nice +%d, %s\n",
      ranks, o.reps, std::max(o.reps, o.reps_small), o.warmup, o.progress_nice, when);
  gb::print_build_note();
  std::printf("# %-9s %-12s %-30s %7s %7s %9s %10s %10s %8s %9s %6s\n", "transport", "model",
              "mode", "tensors", "buckets", "MiB", "median_ms", "min_ms", "algbw", "vs", "#wrong");
  int bad = 0;
  for (const auto& r : rows) {
    const double algbw = r.median_s > 0 ? static_cast<double>(r.bytes) / r.median_s / 1e9 : 0;
    const std::string wrong = r.checked ? std::to_string(r.wrong) : "N/A";
    std::printf("  %-9s %-12s %-30s %7zu %7zu %9.1f %10.3f %10.3f %8.2f %9.2f %6s\n",
                r.transport.c_str(), r.model.c_str(), r.mode.c_str(), r.tensors, r.buckets,
                static_cast<double>(r.bytes) / (1 << 20), r.median_s * 1e3, r.min_s * 1e3, algbw,
                r.vs, wrong.c_str());
    bad += r.wrong != 0;
  }
  // Targets.
  auto find = [&](const std::string& tr, const std::string& model, const std::string& mode) {
    for (const auto& r : rows) {
      if (r.transport == tr && r.model == model && r.mode == mode) return &r;
    }
    return static_cast<const gb::row*>(nullptr);
  };
  for (const auto& tr : o.transports) {
    const auto* unf = find(tr, "1000x4KiB", "unfused");
    if (unf) {
      double best = 0;
      std::string which;
      for (const auto& r : rows) {
        if (r.transport == tr && r.model == "1000x4KiB" && r.mode != "unfused" &&
            r.mode.find("(interleaved)") == std::string::npos && r.vs > best) {
          best = r.vs;
          which = r.mode;
        }
      }
      std::printf("TARGET %-6s 1000x4KiB fused >= 10x unfused: %.1fx (%s)  %s\n", tr.c_str(), best,
                  which.c_str(), best >= 10 ? "PASS" : "FAIL");
    }
    if (const auto* p = find(tr, "1000x4KiB", "zero-copy 25MiB (interleaved)")) {
      std::printf(
          "TARGET %-6s 1000x4KiB fused >= 10x unfused, timed interleaved: %.1fx (zero-copy "
          "25MiB)  %s\n",
          tr.c_str(), p->vs, p->vs >= 10 ? "PASS" : "FAIL");
      // The floors of the same turns: what moving the bytes alone costs caps the ratio.
      for (const auto& r : rows) {
        if (r.transport == tr && r.model == "1000x4KiB" && !r.checked) {
          std::printf(
              "FLOOR  %-6s 1000x4KiB %s: %.3f ms = unfused / %.1f; zero-copy at %.2fx of it\n",
              tr.c_str(), r.mode.c_str(), r.median_s * 1e3, r.vs, p->median_s / r.median_s);
        }
      }
    }
    for (const auto& r : rows) {
      if (r.transport == tr && r.mode.rfind("overlap ", 0) == 0) {
        std::printf("TARGET %-6s %s %s step <= 1.15 x max(compute, comm): %.2f  %s\n", tr.c_str(),
                    r.model.c_str(), r.mode.c_str(), r.vs, r.vs <= 1.15 ? "PASS" : "FAIL");
      }
    }
    for (const auto& m : o.models) {
      const std::string mn = model_named(m, o).name;
      const auto* zc = find(tr, mn, "zero-copy 25MiB");
      const auto* pk = find(tr, mn, "bucket 25MiB");
      if (zc && pk) {
        std::printf(
            "TARGET %-6s %s zero-copy 25MiB (pack %.3f ms) >= packed 25MiB (pack %.3f ms): "
            "%.2fx  %s\n",
            tr.c_str(), mn.c_str(), zc->pack_s * 1e3, pk->pack_s * 1e3, pk->median_s / zc->median_s,
            zc->pack_s == 0 && zc->median_s <= pk->median_s ? "PASS" : "FAIL");
      }
    }
  }
  std::fflush(stdout);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const gb::perf_options o = parse(argc, argv);
  std::vector<gb::row> rows;
  int rc = 0;
#if GRADSYNC_BENCH_MPI
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  {
    gb::mpi_group g(MPI_COMM_WORLD);
    try {
      for (const auto& name : o.transports) {
        if (name == "shm") {
          // A heap for the allreducers' arenas (zero-copy home, packed staging): placed
          // there, peers read the buckets in place (gradsync/allreducer/arena_placement.hpp).
          gs::transport::shm_options base;
          for (const auto& m : o.models)
            base.heap_bytes =
                std::max(base.heap_bytes, 3 * model_named(m, o).params() * sizeof(float));
          base.heap_bytes += 16 << 20;
          gs::transport::shm t(gs::transport::shm_options_from_mpi(MPI_COMM_WORLD, base));
          run_transport(t, g, o, name, rows);
        } else if (name == "mpi") {
          gs::transport::mpi t(MPI_COMM_WORLD);
          // run_pair's floor over MPI: the model's bytes sent to the next rank by MPI itself.
          const int me = static_cast<int>(g.rank()), n = static_cast<int>(g.size());
          exchange_fn sendrecv = [me, n](std::span<const float> from, std::span<float> to) {
            MPI_Sendrecv(from.data(), static_cast<int>(from.size()), MPI_FLOAT, (me + 1) % n, 7,
                         to.data(), static_cast<int>(to.size()), MPI_FLOAT, (me + n - 1) % n, 7,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          };
          run_transport(t, g, o, name, rows, "sendrecv", sendrecv);
        } else {
          if (g.rank() == 0)
            std::fprintf(stderr, "fusion_perf: transport %s not in this build\n", name.c_str());
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fusion_perf rank %zu: %s\n", g.rank(), e.what());
      gs::transport::abort_job(MPI_COMM_WORLD, 3);
    }
    if (g.rank() == 0) rc = report(rows, o, g.size());
  }
  rc = gs::transport::finalize_job(rc);
#else
  for (const auto& name : o.transports) {
    if (name != "local") {
      std::fprintf(stderr,
                   "fusion_perf: this build has only the local transport (use "
                   "fusion_perf_openmpi/_mpich under mpirun for shm and mpi)\n");
      return 2;
    }
  }
  auto state = gb::thread_group::make_state(o.ranks);
  std::vector<std::vector<gb::row> > per_rank(o.ranks);
  gs::transport::run_local(o.ranks, [&](gs::transport::local& t) {
    gb::thread_group g(state, t.rank());
    run_transport(t, g, o, "local", per_rank[t.rank()]);
  });
  rc = report(per_rank[0], o, o.ranks);
#endif
  return rc;
}
