// SPDX-License-Identifier: Apache-2.0
// compress_perf: what each compression policy buys on the wire, against compress::none
// in the same run, and what its encode / decode passes cost against memcpy.
//
//   compress_perf [--ranks 2] [--size 64M] [--iters 5] [--warmup 1]
//                 [--schemes none,fp16,bf16,int8,ef_int8,topk,ef_topk,exact64,exact32]
//                 [--kernels] [--csv PATH]
//   mpirun -n 2 compress_perf_openmpi [--transport mpi|shm] ...
//                                             (transport::mpi or shm; across simulated hosts:
//                                              scripts/vcluster run ... -- compress_perf_...)
//
// Allreduce rows: one registered float tensor of --size bytes, op::avg, algo::ring,
// fusion::none (one bucket), timed from ready() to wait() on the slowest rank, median and
// min over --iters after --warmup. "vs none" is none's median over the row's; "wire MB"
// is this rank's bytes on the wire per call as the allreducer counted them; "enc+dec ms"
// the codec's own passes; "rel err" the L2 error against the exact average (every rank
// can compute every rank's input); "same" whether every rank ended with the same bits.
// Kernel rows (--kernels): encode and decode of one bucket on one core, GB/s of float
// input, against memcpy of the same bytes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <gradsync/gradsync.hpp>
#include <gradsync/testing/exact_inputs.hpp>

#include "../common/group.hpp"
#include "../common/build_note.hpp"

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

struct options {
  std::size_t ranks = 2;
  std::size_t bytes = 64u << 20;
  int iters = 5, warmup = 1;
  std::vector<std::string> schemes = {"none",        "fp16",    "bf16",    "int8",
                                      "ef_int8",     "topk",    "ef_topk", "powersgd",
                                      "ef_powersgd", "exact64", "exact32"};
  std::string transport = "mpi";  // MPI builds: mpi or shm
  bool kernels = false;
  std::string csv;
};

const char* usage_text() {
  return "usage: compress_perf [options]        (MPI builds: mpirun -n N compress_perf_<mpi>)\n"
         "  --ranks N          in-process ranks (local transport), default 2\n"
         "  --size BYTES       the tensor, e.g. 64M (default), 1M, 4096\n"
         "  --iters N          timed calls per scheme, default 5\n"
         "  --warmup N         untimed calls first, default 1\n"
         "  --schemes LIST     none,fp16,bf16,int8,ef_int8,topk,ef_topk,powersgd,ef_powersgd,\n"
         "                     exact64,exact32 (default: all; powersgd: rank 4, the tensor a\n"
         "                     square matrix when its count is a square, e.g. 64M = 4096 x 4096)\n"
         "  --transport T      MPI builds: mpi (default) or shm (one host)\n"
         "  --kernels          also time encode / decode against memcpy (rank 0)\n"
         "  --csv PATH         write the rows as CSV too\n"
         "  -h, --help, --version  print this text, or the version, and exit 0\n";
}

[[noreturn]] void usage_exit(const std::string& why) {
  std::fprintf(stderr, "compress_perf: %s\n%s", why.c_str(), usage_text());
  std::exit(2);
}

std::size_t parse_size(const std::string& flag, const std::string& s) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    if (!s.empty() && s[0] != '-') v = std::stoull(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0) usage_exit(flag + " needs a size, got '" + s + "'");
  const std::string unit = s.substr(used);
  const int shift = unit.empty() ? 0 : unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : -1;
  if (shift < 0) usage_exit(flag + " needs a size (suffix K, M or G), got '" + s + "'");
  return static_cast<std::size_t>(v) << shift;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage_exit(a + " needs a value");
      return argv[++i];
    };
    auto count = [&](int lo) {
      const std::string v = next();
      std::size_t used = 0;
      int x = 0;
      try {
        x = std::stoi(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || x < lo)
        usage_exit(a + " needs a number >= " + std::to_string(lo) + ", got '" + v + "'");
      return x;
    };
    if (a == "-h" || a == "--help") {
      std::fputs(usage_text(), stdout);
      std::exit(0);
    } else if (a == "--version") {
      std::printf("compress_perf (gradsync %s)\n", GRADSYNC_VERSION_STRING);
      std::exit(0);
    } else if (a == "--ranks") {
      o.ranks = static_cast<std::size_t>(count(1));
    } else if (a == "--size") {
      o.bytes = parse_size(a, next());
    } else if (a == "--iters") {
      o.iters = count(1);
    } else if (a == "--warmup") {
      o.warmup = count(0);
    } else if (a == "--schemes") {
      o.schemes.clear();
      std::stringstream ss(next());
      for (std::string x; std::getline(ss, x, ',');) {
        if (!x.empty()) o.schemes.push_back(x);
      }
    } else if (a == "--transport") {
      o.transport = next();
      if (o.transport != "mpi" && o.transport != "shm")
        usage_exit("--transport is mpi or shm, got '" + o.transport + "'");
    } else if (a == "--kernels") {
      o.kernels = true;
    } else if (a == "--csv") {
      o.csv = next();
    } else {
      usage_exit("unknown option '" + a + "'");
    }
  }
  if (o.bytes < sizeof(float)) usage_exit("--size must hold at least one float");
  return o;
}

// Rank r's input: a deterministic gradient-like spread in [-1, 1).
float input(std::size_t r, std::size_t i) {
  std::uint64_t z = (r + 1) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
  z ^= z >> 31;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 29;
  return static_cast<float>(static_cast<double>(z >> 40) / double(1ull << 23) - 1.0);
}

struct row {
  std::string scheme;
  double median_s = 0, min_s = 0, wire_mb = 0, codec_ms = 0, rel_err = 0, vs = 0;
  bool same = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class C, class Tr>
row measure(Tr& t, gb::group& g, const options& o, const char* name) {
  const std::size_t count = o.bytes / sizeof(float), n = g.size();
  gs::allreducer_options ao;
  ao.background_thread = false;  // the caller runs the bucket: nothing else competes
  gs::allreducer<Tr, gs::algo::ring, gs::fusion::none, C> ar(t, ao);
  std::vector<float> x(count);
  const auto side = static_cast<std::size_t>(std::llround(std::sqrt(static_cast<double>(count))));
  if (side * side == count) {
    ar.add(std::span<float>(x), "grad", gs::matrix_shape{side, side});
  } else {
    ar.add(std::span<float>(x), "grad");
  }
  ar.commit(gs::op::avg, gs::element_types<float>{});  // it times floats only
  std::vector<double> times;
  double codec = 0;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    for (std::size_t i = 0; i < count; ++i) x[i] = input(g.rank(), i);
    g.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    ar.ready(0);
    ar.wait();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g.max_all(std::span<double>(&dt, 1));
    if (it >= o.warmup) {
      times.push_back(dt);
      codec += ar.last_stats().compress_seconds;
    }
  }
  row r;
  r.scheme = name;
  r.median_s = median(times);
  r.min_s = *std::min_element(times.begin(), times.end());
  r.wire_mb = static_cast<double>(ar.last_stats().bytes_wire) / 1e6;
  r.codec_ms = codec / o.iters * 1e3;
  // The last call's result: same bits everywhere, and its error against the exact mean.
  const std::uint64_t h = gs::testing::fnv1a64(x.data(), count * sizeof(float));
  r.same = g.sum_all(h == std::stoull(g.broadcast(std::to_string(h))) ? 0 : 1) == 0;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double want = 0;
    for (std::size_t q = 0; q < n; ++q) want += input(q, i);
    want /= static_cast<double>(n);
    num += (x[i] - want) * (x[i] - want);
    den += want * want;
  }
  r.rel_err = den > 0 ? std::sqrt(num / den) : 0;
  return r;
}

template <class Tr>
std::vector<row> run_all(Tr& t, gb::group& g, const options& o) {
  std::vector<row> rows;
  for (const auto& s : o.schemes) {
    if (g.rank() == 0) std::fprintf(stderr, "compress_perf: %s ...\n", s.c_str());
    if (s == "none") {
      rows.push_back(measure<gs::compress::none>(t, g, o, "none"));
    } else if (s == "fp16") {
      rows.push_back(measure<gs::compress::fp16>(t, g, o, "fp16"));
    } else if (s == "bf16") {
      rows.push_back(measure<gs::compress::bf16>(t, g, o, "bf16"));
    } else if (s == "int8") {
      rows.push_back(measure<gs::compress::int8<>>(t, g, o, "int8"));
    } else if (s == "ef_int8") {
      rows.push_back(
          measure<gs::compress::error_feedback<gs::compress::int8<>>>(t, g, o, "ef_int8"));
    } else if (s == "topk") {
      rows.push_back(measure<gs::compress::topk<10>>(t, g, o, "topk"));
    } else if (s == "ef_topk") {
      rows.push_back(
          measure<gs::compress::error_feedback<gs::compress::topk<10>>>(t, g, o, "ef_topk"));
    } else if (s == "powersgd") {
      rows.push_back(measure<gs::compress::powersgd<4>>(t, g, o, "powersgd"));
    } else if (s == "ef_powersgd") {
      rows.push_back(
          measure<gs::compress::error_feedback<gs::compress::powersgd<4>>>(t, g, o, "ef_powersgd"));
    } else if (s == "exact64") {
      rows.push_back(measure<gs::compress::exact<64>>(t, g, o, "exact64"));
    } else if (s == "exact32") {
      rows.push_back(measure<gs::compress::exact<32>>(t, g, o, "exact32"));
    } else {
      usage_exit("unknown scheme '" + s +
                 "' (none, fp16, bf16, int8, ef_int8, topk, ef_topk, powersgd, ef_powersgd, "
                 "exact64, exact32)");
    }
  }
  const row* none = nullptr;
  for (const auto& r : rows) {
    if (r.scheme == "none") none = &r;
  }
  for (auto& r : rows) r.vs = none ? none->median_s / r.median_s : 0;
  return rows;
}

// Encode / decode of one bucket on this core against memcpy of the same float bytes.
struct kernel_row {
  std::string pass;
  double gbs = 0, vs_memcpy = 0;
  double moved_vs_memcpy = 0;  // bytes read + written per second against memcpy's (0: n/a)
};

template <class F>
double best_of(int reps, F f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::vector<kernel_row> kernel_rows(const options& o) {
  const std::size_t count = o.bytes / sizeof(float), block = 256,
                    blocks = (count + block - 1) / block;
  std::vector<float> x(count), y(count), res(count), scales(blocks);
  std::vector<std::int8_t> codes(count);
  std::vector<gs::half> h(count);
  for (std::size_t i = 0; i < count; ++i) x[i] = input(0, i);
  const int reps = 5;
  const double bytes = static_cast<double>(count * sizeof(float));
  const double copy =
      best_of(reps, [&] { std::memcpy(y.data(), x.data(), count * sizeof(float)); });
  std::vector<kernel_row> out;
  auto add = [&](const char* pass, double s) {
    out.push_back({pass, bytes / s / 1e9, copy / s, 0});
  };
  // A pass that reads `in` and writes `out` bytes per float, against memcpy's 4 + 4.
  auto add_moved = [&](const char* pass, double in, double written, double s) {
    out.push_back({pass, bytes / s / 1e9, copy / s, copy / s * (in + written) / 8.0});
  };
  add("memcpy", copy);
  add("fp16 encode", best_of(reps, [&] { gs::kernels::cast(h.data(), x.data(), count); }));
  add("fp16 decode", best_of(reps, [&] { gs::kernels::cast(y.data(), h.data(), count); }));
  add("int8 encode (absmax + codes)", best_of(reps, [&] {
        gs::kernels::block_absmax(scales.data(), x.data(), count, block);
        gs::kernels::quantize_blocks(codes.data(), static_cast<float*>(nullptr), x.data(),
                                     scales.data(), count, block, 63);
      }));
  add("int8 encode + residual", best_of(reps, [&] {
        gs::kernels::block_absmax(scales.data(), x.data(), count, block);
        gs::kernels::quantize_blocks(codes.data(), res.data(), x.data(), scales.data(), count,
                                     block, 63);
      }));
  add("int8 decode", best_of(reps, [&] {
        gs::kernels::dequantize_blocks(y.data(), codes.data(), scales.data(), count, block, 63, 2);
      }));
  const std::size_t k = gs::compress::topk<10>::keep(count);
  std::vector<std::uint32_t> idx(k);
  add("topk 1% select",
      best_of(reps, [&] { gs::kernels::topk_indices(idx.data(), x.data(), count, k); }));
  add("topk 1% decode (zero + scatter)", best_of(reps, [&] {
        std::memset(y.data(), 0, count * sizeof(float));
        for (std::size_t j = 0; j < k; ++j) y[idx[j]] += x[idx[j]];
      }));
  // compress::exact's three passes, per block of 256 as the codec runs them.
  namespace gx = gs::kernels::exact;
  constexpr int k64 = gs::compress::exact<64>::lane_bits, k32 = gs::compress::exact<32>::lane_bits;
  std::vector<int> fields(blocks);
  std::vector<std::int64_t> c64(count);
  std::vector<std::int32_t> c32(count);
  auto each = [&](auto f) {
    for (std::size_t b = 0; b < blocks; ++b) f(b * block, std::min(block, count - b * block), b);
  };
  add_moved("exact exponent scan", 4, 0, best_of(reps, [&] {
              each([&](std::size_t at, std::size_t len, std::size_t b) {
                fields[b] = gx::scan(x.data() + at, len).field;
              });
            }));
  // Encode, then decode (an average of 4), with codes of type Code and K fraction bits.
  auto code_rows = [&]<class Code, int K>(const char* enc, const char* dec, std::vector<Code>& c) {
    constexpr double wide = sizeof(Code);
    add_moved(enc, 4, wide, best_of(reps, [&] {
                each([&](std::size_t at, std::size_t len, std::size_t b) {
                  gx::encode<float, Code, K>(c.data() + at, x.data() + at, len, fields[b]);
                });
              }));
    add_moved(dec, wide, 4, best_of(reps, [&] {
                each([&](std::size_t at, std::size_t len, std::size_t b) {
                  gx::decode<float, Code, K>(y.data() + at, c.data() + at, len, fields[b], 4);
                });
              }));
  };
  code_rows.template operator()<std::int64_t, k64>("exact64 encode", "exact64 decode (avg of 4)",
                                                   c64);
  code_rows.template operator()<std::int32_t, k32>("exact32 encode", "exact32 decode (avg of 4)",
                                                   c32);
  return out;
}

int report(const std::vector<row>& rows, const std::vector<kernel_row>& krows, const options& o,
           std::size_t ranks, const char* transport) {
  std::printf(
      "# compress_perf: %zu ranks over %s, %.1f MiB float, op avg, algo::ring, median of %d "
      "(after %d warm-up) of the slowest rank\n",
      ranks, transport, static_cast<double>(o.bytes) / (1 << 20), o.iters, o.warmup);
  gradsync::bench::print_build_note();
  std::printf("# %-9s %10s %10s %8s %9s %11s %10s %5s\n", "scheme", "median_ms", "min_ms",
              "vs none", "wire MB", "enc+dec ms", "rel err", "same");
  int bad = 0;
  for (const auto& r : rows) {
    std::printf("  %-9s %10.2f %10.2f %8.2f %9.2f %11.2f %10.2e %5s\n", r.scheme.c_str(),
                r.median_s * 1e3, r.min_s * 1e3, r.vs, r.wire_mb, r.codec_ms, r.rel_err,
                r.same ? "yes" : "NO");
    bad += !r.same;
    // Lossless schemes and casts of values in [-1, 1) stay close; anything else is a bug.
    if (r.scheme == "none" && r.rel_err > 1e-6) ++bad;
    if (r.scheme == "exact64" && r.rel_err > 1e-7) ++bad;  // correctly rounded sums
  }
  if (!krows.empty()) {
    std::printf(
        "# kernels on one core, %.1f MiB float: GB/s of float input, ratio to memcpy; for\n"
        "# exact's passes also bytes read + written per second against memcpy's\n",
        static_cast<double>(o.bytes) / (1 << 20));
    for (const auto& k : krows) {
      std::printf("  %-34s %8.2f GB/s %6.2fx", k.pass.c_str(), k.gbs, k.vs_memcpy);
      if (k.moved_vs_memcpy > 0) std::printf("   moved %5.2fx", k.moved_vs_memcpy);
      std::printf("\n");
    }
  }
  if (!o.csv.empty()) {
    if (FILE* f = std::fopen(o.csv.c_str(), "w")) {
      std::fprintf(f,
                   "kind,scheme,ranks,transport,bytes,median_s,min_s,vs_none,wire_mb,codec_ms,rel_"
                   "err,same,gbs,vs_memcpy,moved_vs_memcpy\n");
      for (const auto& r : rows)
        std::fprintf(f, "allreduce,%s,%zu,%s,%zu,%.6f,%.6f,%.3f,%.3f,%.3f,%.3e,%d,,,\n",
                     r.scheme.c_str(), ranks, transport, o.bytes, r.median_s, r.min_s, r.vs,
                     r.wire_mb, r.codec_ms, r.rel_err, r.same ? 1 : 0);
      for (const auto& k : krows)
        std::fprintf(f, "kernel,%s,1,host,%zu,,,,,,,,%.3f,%.3f,%.3f\n", k.pass.c_str(), o.bytes,
                     k.gbs, k.vs_memcpy, k.moved_vs_memcpy);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "compress_perf: cannot write %s\n", o.csv.c_str());
      return 1;
    }
  }
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  int rc = 0;
#if GRADSYNC_BENCH_MPI
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  {
    gb::mpi_group g(MPI_COMM_WORLD);
    std::vector<row> rows;
    try {
      if (o.transport == "shm") {
        gs::transport::shm_options base;  // the arena (the tensor) and the codes' staging
        base.heap_bytes = 4 * o.bytes + (16 << 20);
        gs::transport::shm t(gs::transport::shm_options_from_mpi(MPI_COMM_WORLD, base));
        rows = run_all(t, g, o);
      } else {
        gs::transport::mpi t(MPI_COMM_WORLD);
        rows = run_all(t, g, o);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "compress_perf rank %zu: %s\n", g.rank(), e.what());
      gs::transport::abort_job(MPI_COMM_WORLD, 3);
    }
    if (g.rank() == 0)
      rc = report(rows, o.kernels ? kernel_rows(o) : std::vector<kernel_row>{}, o, g.size(),
                  o.transport.c_str());
  }
  rc = gs::transport::finalize_job(rc);
#else
  auto state = gb::thread_group::make_state(o.ranks);
  std::vector<row> rows;
  gs::transport::run_local(o.ranks, [&](gs::transport::local& t) {
    gb::thread_group g(state, t.rank());
    auto r = run_all(t, g, o);
    if (t.rank() == 0) rows = std::move(r);
  });
  rc = report(rows, o.kernels ? kernel_rows(o) : std::vector<kernel_row>{}, o, o.ranks, "local");
#endif
  return rc;
}
