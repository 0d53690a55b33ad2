// SPDX-License-Identifier: Apache-2.0
// collectives_perf: gradsync::broadcast, allgather and reduce_scatter against the MPI
// library's MPI_Bcast, MPI_Allgather and MPI_Reduce_scatter_block, timed interleaved
// (gradsync, MPI, gradsync, MPI, ... each between barriers) so that both see the same
// machine, over transport::shm, transport::mpi or two_level_from_mpi. float, sum.
// shm_reg: transport::shm with gradsync's buffers in the transport's heap
// (shm::allocate), which the direct collectives read in place.
//
//   mpirun -n 4 collectives_perf_openmpi --transport shm -b 1M -e 64M
//
// Sizes follow nccl-tests: the bytes of the whole buffer (broadcast: the message;
// allgather: the output, n blocks; reduce_scatter: the input, n blocks). algbw = bytes /
// time; busbw = algbw (broadcast) or algbw * (n-1)/n (allgather, reduce_scatter): the
// bytes each rank must move through its slowest link. Every size is checked for exact
// results on both sides (#wrong, summed over ranks).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gradsync/allgather.hpp>
#include <gradsync/broadcast.hpp>
#include <gradsync/reduce_scatter.hpp>
#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/mpi/exit.hpp>
#include <gradsync/transport/shm/from_mpi.hpp>
#include <gradsync/transport/two_level/from_mpi.hpp>

#include "../common/build_note.hpp"

namespace gs = gradsync;

namespace {

struct options {
  std::string transport = "shm";  // shm | shm_reg | mpi | two_level
  std::vector<std::string> collectives = {"broadcast", "allgather", "reduce_scatter"};
  std::size_t min_bytes = 1 << 20, max_bytes = 64 << 20;
  std::size_t iters = 10, warmup = 3;
  std::size_t node_ranks = 0;  // two_level: consecutive ranks per node (0: per host)
  bool check = true;           // --check 0: no argument agreement (what it costs)
  // mpi, two_level: mpi_options::network_message_bytes (the default, network_auto, when absent)
  std::size_t net_msg = gs::transport::mpi_options{}.network_message_bytes;
};

std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string unit = end ? end : "";
  if (unit == "K" || unit == "k") v *= 1024;
  if (unit == "M" || unit == "m") v *= 1024 * 1024;
  if (unit == "G" || unit == "g") v *= 1024.0 * 1024 * 1024;
  if (!(v > 0) || (!unit.empty() && unit != "K" && unit != "k" && unit != "M" && unit != "m" &&
                   unit != "G" && unit != "g")) {
    std::fprintf(stderr, "collectives_perf: bad size '%s' (e.g. 4096, 64K, 1M)\n", s.c_str());
    std::exit(2);
  }
  return static_cast<std::size_t>(v);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "collectives_perf: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--transport") {
      o.transport = value();
    } else if (a == "--collective") {
      const std::string c = value();
      if (c != "all") o.collectives = {c};
    } else if (a == "-b") {
      o.min_bytes = parse_size(value());
    } else if (a == "-e") {
      o.max_bytes = parse_size(value());
    } else if (a == "-n") {
      o.iters = static_cast<std::size_t>(std::atol(value().c_str()));
    } else if (a == "-w") {
      o.warmup = static_cast<std::size_t>(std::atol(value().c_str()));
    } else if (a == "--check") {
      const std::string v = value();
      if (v != "0" && v != "1") {
        std::fprintf(stderr, "collectives_perf: --check takes 0 or 1, got '%s'\n", v.c_str());
        std::exit(2);
      }
      o.check = v == "1";
    } else if (a == "--node-ranks") {
      o.node_ranks = static_cast<std::size_t>(std::atol(value().c_str()));
    } else if (a == "--network-message-bytes") {
      const std::string v = value();
      o.net_msg = v == "auto" ? gs::transport::mpi_options::network_auto
                  : v == "0"  ? 0
                              : parse_size(v);
    } else {
      std::fprintf(stderr,
                   "usage: collectives_perf [--transport shm|shm_reg|mpi|two_level] [--collective "
                   "all|broadcast|allgather|reduce_scatter] [-b MIN] [-e MAX] [-n ITERS] [-w "
                   "WARMUP] [--node-ranks K] [--check 0|1] [--network-message-bytes SIZE|auto]\n");
      std::exit(2);
    }
  }
  for (const auto& c : o.collectives) {
    if (c != "broadcast" && c != "allgather" && c != "reduce_scatter") {
      std::fprintf(stderr, "collectives_perf: unknown collective '%s'\n", c.c_str());
      std::exit(2);
    }
  }
  if (o.transport != "shm" && o.transport != "shm_reg" && o.transport != "mpi" &&
      o.transport != "two_level") {
    std::fprintf(stderr, "collectives_perf: --transport must be shm, shm_reg, mpi or two_level\n");
    std::exit(2);
  }
  if (o.iters == 0 || o.min_bytes > o.max_bytes) {
    std::fprintf(stderr, "collectives_perf: need -n >= 1 and -b <= -e\n");
    std::exit(2);
  }
  return o;
}

float value_at(std::size_t who, std::size_t i) {
  return static_cast<float>((i * 7 + who * 13) % 201) - 100.0f;
}

/// One collective's buffers and its two implementations.
struct subject {
  std::span<float> in, out;
  std::vector<float> in_v, out_v;                // the buffers, unless in the heap
  std::vector<std::shared_ptr<void>> heap_bufs;  // shm_reg: the buffers in the heap
  std::function<void()> gradsync_run, mpi_run;
  std::function<void()> fill;                // the inputs (and garbage in outputs)
  std::function<std::size_t()> count_wrong;  // after one run
};

/// Points s.in and s.out at `in` and `out` floats: in t's heap with `heap`, else vectors.
template <class Tr>
void place(Tr& t, subject& s, std::size_t in, std::size_t out, bool heap) {
  if constexpr (std::is_same_v<Tr, gs::transport::shm>) {
    if (heap) {
      for (auto [count, span] : {std::pair{in, &s.in}, std::pair{out, &s.out}}) {
        auto b =
            std::make_shared<gs::transport::shm::buffer<float>>(t.template allocate<float>(count));
        *span = b->span();
        s.heap_bufs.push_back(b);
      }
      return;
    }
  }
  (void)t, (void)heap;
  s.in_v.resize(in);
  s.out_v.resize(out);
  s.in = s.in_v;
  s.out = s.out_v;
}

template <class Tr>
subject make(Tr& t, const std::string& c, std::size_t bytes, MPI_Comm comm, bool heap, bool check) {
  gs::call_options opt;
  opt.check = check;
  const std::size_t n = t.size(), r = t.rank(), total = bytes / sizeof(float), m = total / n;
  subject s;
  const int im = static_cast<int>(m);
  if (c == "broadcast") {
    place(t, s, 0, total, heap);
    s.fill = [&s, r, total] {
      for (std::size_t i = 0; i < total; ++i) s.out[i] = value_at(r == 0 ? 0 : 7, i);
    };
    s.gradsync_run = [&t, &s, opt] { gs::broadcast(t, std::span<float>(s.out), 0, opt); };
    s.mpi_run = [&s, total, comm] {
      MPI_Bcast(s.out.data(), static_cast<int>(total), MPI_FLOAT, 0, comm);
    };
    s.count_wrong = [&s, total] {
      std::size_t w = 0;
      for (std::size_t i = 0; i < total; ++i) w += s.out[i] != value_at(0, i);
      return w;
    };
  } else if (c == "allgather") {
    place(t, s, m, n * m, heap);
    s.fill = [&s, r, m] {
      for (std::size_t i = 0; i < m; ++i) s.in[i] = value_at(r, i);
      std::fill(s.out.begin(), s.out.end(), -1.0f);
    };
    s.gradsync_run = [&t, &s, opt] {
      gs::allgather(t, std::span<const float>(s.in), std::span<float>(s.out), opt);
    };
    s.mpi_run = [&s, im, comm] {
      MPI_Allgather(s.in.data(), im, MPI_FLOAT, s.out.data(), im, MPI_FLOAT, comm);
    };
    s.count_wrong = [&s, n, m] {
      std::size_t w = 0;
      for (std::size_t q = 0; q < n; ++q)
        for (std::size_t i = 0; i < m; ++i) w += s.out[q * m + i] != value_at(q, i);
      return w;
    };
  } else {  // reduce_scatter: small integers, so every order sums exactly
    place(t, s, n * m, m, heap);
    s.fill = [&s, r, n, m] {
      for (std::size_t i = 0; i < n * m; ++i) s.in[i] = static_cast<float>((i + r) % 5);
    };
    s.gradsync_run = [&t, &s, opt] {
      gs::reduce_scatter(t, std::span<const float>(s.in), std::span<float>(s.out), gs::op::sum,
                         opt);
    };
    s.mpi_run = [&s, im, comm] {
      MPI_Reduce_scatter_block(s.in.data(), s.out.data(), im, MPI_FLOAT, MPI_SUM, comm);
    };
    s.count_wrong = [&s, n, m, r] {
      std::size_t w = 0;
      for (std::size_t i = 0; i < m; ++i) {
        float want = 0;
        for (std::size_t q = 0; q < n; ++q) want += static_cast<float>((r * m + i + q) % 5);
        w += s.out[i] != want;
      }
      return w;
    };
  }
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The message cut transport::mpi was given or chose (network_auto), with the link it measured.
std::string mpi_cut_note(const gs::transport::mpi& m) {
  char rate[48] = "";
  if (m.link_gbps() > 0) std::snprintf(rate, sizeof rate, " (link %.2f Gbit/s)", m.link_gbps());
  return "  network_message_bytes=" + std::to_string(m.options().network_message_bytes) + rate;
}
template <class Tr>
std::string cut_note(Tr& t) {
  if constexpr (std::is_same_v<Tr, gs::transport::mpi>) {
    return mpi_cut_note(t);
  } else if constexpr (requires { t.inter(); }) {
    return mpi_cut_note(t.inter());
  } else {
    return "";
  }
}

template <class Tr>
std::size_t run_all(Tr& t, const options& o, MPI_Comm comm, const char* mpi_name) {
  const std::size_t n = t.size(), me = t.rank();
  std::size_t wrong_total = 0;
  if (me == 0) gradsync::bench::print_build_note();
  for (const std::string& c : o.collectives) {
    if (me == 0) {
      std::printf("# %s  transport=%s  ranks=%zu  mpi=%s  float sum, interleaved with MPI%s%s\n",
                  c.c_str(), o.transport.c_str(), n, mpi_name,
                  o.check ? "" : "  (--check 0: no argument agreement)", cut_note(t).c_str());
      std::printf("#%12s %12s %12s %9s %9s %12s %9s %9s %8s %8s\n", "bytes", "count", "gs time us",
                  "algbw", "busbw", "mpi time us", "algbw", "busbw", "gs/mpi", "#wrong");
      std::fflush(stdout);
    }
    for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
      const std::size_t per = bytes / sizeof(float) / n * n * sizeof(float);  // n blocks
      subject s = make(t, c, per, comm, o.transport == "shm_reg", o.check);
      std::vector<double> tg(o.iters), tm(o.iters);
      s.fill();
      for (std::size_t i = 0; i < o.warmup; ++i) s.gradsync_run(), s.mpi_run();
      for (std::size_t i = 0; i < o.iters; ++i) {
        MPI_Barrier(comm);
        auto t0 = std::chrono::steady_clock::now();
        s.gradsync_run();
        tg[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                    .count();
        MPI_Barrier(comm);
        t0 = std::chrono::steady_clock::now();
        s.mpi_run();
        tm[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                    .count();
      }
      MPI_Allreduce(MPI_IN_PLACE, tg.data(), static_cast<int>(o.iters), MPI_DOUBLE, MPI_MAX, comm);
      MPI_Allreduce(MPI_IN_PLACE, tm.data(), static_cast<int>(o.iters), MPI_DOUBLE, MPI_MAX, comm);
      std::uint64_t wrong = 0;
      s.fill();
      s.gradsync_run();
      wrong += s.count_wrong();
      s.fill();
      s.mpi_run();
      wrong += s.count_wrong();
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_UINT64_T, MPI_SUM, comm);
      wrong_total += wrong;
      const double g = median(tg), mp = median(tm);
      const double factor = c == "broadcast" ? 1.0 : double(n - 1) / double(n);
      const double ga = double(per) / (g * 1e3), ma = double(per) / (mp * 1e3);
      if (me == 0) {
        std::printf(" %12zu %12zu %12.1f %9.2f %9.2f %12.1f %9.2f %9.2f %8.2f %8llu\n", per,
                    per / sizeof(float), g, ga, ga * factor, mp, ma, ma * factor, mp / g,
                    static_cast<unsigned long long>(wrong));
        std::fflush(stdout);
      }
    }
  }
  return wrong_total;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const options o = parse(argc, argv);
#ifdef OPEN_MPI
  const char* mpi_name = "openmpi";
#else
  const char* mpi_name = "mpich";
#endif
  std::size_t wrong = 0;
  try {
    if (o.transport == "mpi") {
      gs::transport::mpi t{MPI_COMM_WORLD, {.network_message_bytes = o.net_msg}};
      wrong = run_all(t, o, MPI_COMM_WORLD, mpi_name);
    } else if (o.transport == "shm" || o.transport == "shm_reg") {
      gs::transport::shm_options so = gs::transport::shm_options_from_mpi(MPI_COMM_WORLD);
      if (o.transport == "shm_reg") so.heap_bytes = 2 * o.max_bytes + (1 << 20);  // in + out
      gs::transport::shm t(so);
      wrong = run_all(t, o, MPI_COMM_WORLD, mpi_name);
    } else {
      int world = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &world);
      const int color = o.node_ranks ? world / static_cast<int>(o.node_ranks) : -1;
      auto t = gs::transport::two_level_from_mpi(MPI_COMM_WORLD, {}, color,
                                                 {.network_message_bytes = o.net_msg});
      wrong = run_all(t, o, MPI_COMM_WORLD, mpi_name);
    }
  } catch (const gs::error& e) {
    std::fprintf(stderr, "collectives_perf: %s\n", e.what());
    gs::transport::abort_job(MPI_COMM_WORLD, 1);
  }
  // Not MPI_Finalize: MPICH's can hang across hosts (transport/mpi/exit.hpp).
  return gs::transport::finalize_job(wrong == 0 ? 0 : 1);
}
