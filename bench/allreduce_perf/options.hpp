// SPDX-License-Identifier: Apache-2.0
// allreduce_perf's command line (nccl-tests' flags plus transport/algorithm/peer choice).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gradsync/core/deadline.hpp"
#include "gradsync/algo/list.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/op.hpp"

namespace gradsync::bench {

/// Every algorithm name --algo understands, in table order ("all" selects these): the
/// host list (algo/list.hpp). hierarchical / hierarchical_native run on the two_level
/// transport only (ring or MPI_Allreduce across nodes).
inline const std::vector<std::string> all_algos = [] {
  std::vector<std::string> v;
  for (std::string_view n : algo::algorithm_names<algo::host_algorithms>()) v.emplace_back(n);
  return v;
}();
/// Every transport name --transport understands.
/// shm_reg: transport::shm with every buffer allocated in its heap (registered).
/// two_level: shm inside each node and mpi across nodes (two_level_from_mpi).
inline const std::vector<std::string> all_transports = {"local", "shm", "shm_reg", "mpi",
                                                        "two_level"};
/// Every peer --peers understands.
inline const std::vector<std::string> all_peers = {"mpi", "gloo", "stream"};

/// --network-message-bytes auto: transport::mpi_options::network_auto (this header stays
/// MPI-free; rows_mpi.cpp checks that the two agree).
inline constexpr std::size_t net_msg_auto = static_cast<std::size_t>(-1);

struct options {
  std::size_t min_bytes = 8;          ///< -b
  std::size_t max_bytes = 32u << 20;  ///< -e
  double factor = 2;                  ///< -f
  std::size_t iters = 20;             ///< -n
  std::size_t warmup = 5;             ///< -w
  std::size_t iter_bytes = 0;         ///< --iter-bytes: cap iters so iters*size <= this (min 3)
  bool check = true;                  ///< -c
  bool agree = true;                  ///< --agree: gradsync's cross-rank argument check
  bool verify = gradsync::default_verify();  ///< --verify: compare result hashes per call
  bool check_finite = gradsync::default_check_finite();  ///< --check-finite: NaN/Inf check
  bool interleave = false;  ///< --interleave: alternate with MPI_Allreduce
  bool p2p = false;         ///< --p2p: after each --interleave pair, time the bare exchange
  std::size_t mpi_stage = std::size_t{64} << 20;  ///< --mpi-stage: mpi_options::stage_limit_bytes
  std::size_t net_msg =
      net_msg_auto;               ///< --network-message-bytes (mpi_options::network_message_bytes)
  dtype type = dtype::f32;        ///< -d
  reduce_op op = reduce_op::sum;  ///< -o
  std::vector<std::string>
      transports;  ///< --transport (default: local alone, shm+mpi under mpirun)
  std::vector<std::string> algos = {"all"};  ///< --algo
  std::vector<std::string> peers;            ///< --peers (default none)
  std::size_t ranks = 2;                     ///< --ranks (in-process ranks of the local transport)
  std::size_t node_ranks = 0;                ///< --node-ranks (two_level; 0: one node per host)
  std::string csv;                           ///< --csv
  std::size_t stream_bytes = 64u << 20;      ///< --stream-bytes: each of a, b, c per rank
  std::string gloo_algos = "ring_chunked,halving_doubling";  ///< --gloo-algos
  std::string gloo_iface;            ///< --gloo-iface: Gloo's network interface (default 127.0.0.1)
  bool corrupt = false;              ///< --self-test-corrupt: spoil one checked element
  bool help = false;                 ///< -h, --help: usage to stdout, exit 0
  bool version = false;              ///< --version: the version to stdout, exit 0
  std::size_t require_gradsync = 0;  ///< --require-gradsync: fail if fewer tables ran
};

inline std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = s.find(',', start);
    const std::string_view item =
        s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!item.empty()) out.emplace_back(item);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

/// "64", "4K", "256M", "1G" (powers of 1024) -> bytes.
inline std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) throw std::invalid_argument("bad size '" + s + "'");
  double mult = 1;
  switch (*end) {
    case 'k':
    case 'K':
      mult = 1024.0;
      ++end;
      break;
    case 'm':
    case 'M':
      mult = 1024.0 * 1024;
      ++end;
      break;
    case 'g':
    case 'G':
      mult = 1024.0 * 1024 * 1024;
      ++end;
      break;
    default:
      break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') throw std::invalid_argument("bad size '" + s + "'");
  return static_cast<std::size_t>(v * mult);
}

inline dtype parse_dtype(const std::string& s) {
  if (s == "float" || s == "float32" || s == "f32") return dtype::f32;
  if (s == "double" || s == "float64" || s == "f64") return dtype::f64;
  if (s == "half" || s == "float16" || s == "f16") return dtype::f16;
  if (s == "bfloat16" || s == "bf16") return dtype::bf16;
  if (s == "int32" || s == "int" || s == "i32") return dtype::i32;
  if (s == "int64" || s == "i64") return dtype::i64;
  throw std::invalid_argument("unknown type '" + s +
                              "' (float, double, half, bfloat16, int32, int64)");
}

inline reduce_op parse_op(const std::string& s) {
  if (s == "sum") return reduce_op::sum;
  if (s == "prod") return reduce_op::prod;
  if (s == "min") return reduce_op::min;
  if (s == "max") return reduce_op::max;
  if (s == "avg") return reduce_op::avg;
  throw std::invalid_argument("unknown op '" + s + "' (sum, prod, min, max, avg)");
}

/// Whether this build times (-d T, -o Op). A build configured with
/// -Dbench_type_ops=common (scripts/test) instantiates 13 pairs instead of 28: sum of
/// every type, avg of the floating types, every op on float.
template <class T, class Op>
constexpr bool pair_built() {
  if constexpr (std::is_same_v<T, std::int8_t>) {
    return false;  // compress::int8's wire type; parse_dtype does not offer it here
  } else if constexpr (Op::id == reduce_op::avg && !is_floating_element_v<T>) {
    return false;
  } else {
#if GRADSYNC_BENCH_COMMON_TYPE_OPS
    return Op::id == reduce_op::sum || Op::id == reduce_op::avg || std::is_same_v<T, float>;
#else
    return true;
#endif
  }
}

/// Calls `f.template operator()<T, Op>()` with the element type and op that `o` names
/// (-d, -o); parse_options has refused the pairs this build does not time.
template <class F>
void visit_type_op(const options& o, F&& f) {
  visit_dtype(o.type, [&](auto tv) {
    using T = std::remove_cvref_t<decltype(tv)>;
    visit_op(o.op, [&](auto opv) {
      using Op = std::remove_cvref_t<decltype(opv)>;
      if constexpr (pair_built<T, Op>()) f.template operator()<T, Op>();
    });
  });
}

/// Short type names for the table (nccl-tests style).
inline std::string type_label(dtype d) {
  switch (d) {
    case dtype::f32:
      return "float";
    case dtype::f64:
      return "double";
    case dtype::f16:
      return "half";
    case dtype::bf16:
      return "bfloat16";
    case dtype::i32:
      return "int32";
    case dtype::i64:
      return "int64";
    case dtype::i8:
      return "int8";
  }
  return "?";
}

/// Throws std::invalid_argument naming -d and -o when this build does not time the pair.
inline void check_type_op(const options& o) {
  visit_dtype(o.type, [&](auto tv) {
    using T = std::remove_cvref_t<decltype(tv)>;
    visit_op(o.op, [&](auto opv) {
      using Op = std::remove_cvref_t<decltype(opv)>;
      if constexpr (!pair_built<T, Op>()) {
        const std::string pair = "-d " + type_label(o.type) + " -o " + std::string(op_name(Op::id));
        if constexpr (Op::id == reduce_op::avg && !is_floating_element_v<T>) {
          throw std::invalid_argument(pair + ": op avg needs a floating-point type");
        } else {
          throw std::invalid_argument(
              pair +
              ": not built (this build times sum of every type, avg of the floating "
              "types and every op on float; configure with -Dbench_type_ops=all)");
        }
      }
    });
  });
}

inline const char* usage_text() {
  return "usage: allreduce_perf [options]\n"
         "  -b SIZE        smallest message (bytes; K/M/G suffixes), default 8\n"
         "  -e SIZE        largest message, default 32M\n"
         "  -f FACTOR      size multiplier between rows, default 2\n"
         "  -n N           timed iterations per size, default 20\n"
         "  -w N           warm-up iterations per size, default 5\n"
         "  --iter-bytes SIZE  fewer iterations at large sizes: iters*size <= SIZE (>= 3),\n"
         "                 and at most iters/4 warm-ups (>= 1)\n"
         "  -c 0|1         count wrong elements from exact inputs, default 1\n"
         "  -d TYPE        float, double, half, bfloat16, int32, int64 (default float)\n"
         "  -o OP          sum, prod, min, max, avg (default sum); a build configured with\n"
         "                 -Dbench_type_ops=common times sum of every type, avg of the\n"
         "                 floating types and every op on float\n"
         "  --transport L  comma list of local, shm, shm_reg, mpi, two_level (default:\n"
         "                 local alone; under mpirun with more than one rank: shm,mpi);\n"
         "                 shm_reg is shm with registered buffers (shm::allocate);\n"
         "                 two_level is shm inside each node and mpi across nodes;\n"
         "                 'none' for peers only\n"
         "  --algo L       comma list of ring, tree, halving_doubling, direct_one_shot,\n"
         "                 direct_two_shot, native, auto, hierarchical (two_level; ring\n"
         "                 across nodes), hierarchical_native (MPI_Allreduce across), or\n"
         "                 all (default all that apply)\n"
         "  --node-ranks K two_level: nodes of K consecutive ranks (default: one per host)\n"
         "  --ranks N      in-process ranks of the local transport (and of the peers\n"
         "                 when not under mpirun), default 2\n"
         "  --peers L      comma list of mpi, gloo, stream, or all (default none)\n"
         "  --gloo-algos L ring_chunked,halving_doubling (default both)\n"
         "  --gloo-iface I Gloo's TCP device on interface I (e.g. eth0 across hosts;\n"
         "                 default: 127.0.0.1, one host)\n"
         "  --stream-bytes SIZE  array size per rank of the STREAM probe, default 64M\n"
         "  --agree 0|1    gradsync's cross-rank argument check per call, default 1\n"
         "  --verify 0|1   gradsync's result verification per call (hash + exchange),\n"
         "                 default GRADSYNC_VERIFY or 0\n"
         "  --check-finite 0|1  gradsync's NaN/Inf check of every input (scan + exchange),\n"
         "                 default GRADSYNC_CHECK_FINITE or 0\n"
         "  --interleave   under mpirun: time every gradsync table iteration by iteration\n"
         "                 alternately with MPI_Allreduce (its rows follow each table), so\n"
         "                 a change of the machine's speed during the run hits both alike\n"
         "  --p2p          with --interleave: after each pair, time MPI_Sendrecv of the\n"
         "                 whole vector to the next rank (rows p2p_exchange): the bytes\n"
         "                 any allreduce must bring to each rank, moved alone\n"
         "  --mpi-stage SIZE  transport::mpi's huge-page staging of large sends\n"
         "                 (mpi_options::stage_limit_bytes), default 64M; 0 turns it off\n"
         "  --network-message-bytes SIZE|auto  cut messages to ranks on other hosts into\n"
         "                 messages of SIZE (mpi_options::network_message_bytes; 0: whole),\n"
         "                 default auto: the transport measures the link and chooses\n"
         "  --csv FILE     append every row to FILE\n"
         "  --self-test-corrupt  spoil one element of every checked result on the last\n"
         "                 rank; exit 0 only if #wrong counted exactly one per checked row\n"
         "  --require-gradsync N  fail (exit 4) if fewer than N gradsync tables ran\n"
         "  -h, --help, --version  print this text, or the version, and exit 0\n"
         "Exit status: 0 if every checked row has #wrong == 0, 1 if any is wrong, 2 on a\n"
         "usage error, 3 if an implementation threw, 4 if --require-gradsync was not met.\n";
}

/// Parses argv; throws std::invalid_argument with a message on a bad flag.
inline options parse_options(int argc, char** argv) {
  options o;
  auto need = [&](int& i) -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(std::string("missing value after ") + argv[i]);
    return argv[++i];
  };
  auto parse_count = [](const std::string& s) {
    char* end = nullptr;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (end == s.c_str() || *end != '\0' || v < 0)
      throw std::invalid_argument("bad count '" + s + "'");
    return static_cast<std::size_t>(v);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool known = true;
    try {  // a bad value names its flag
      if (a == "-b" || a == "--minbytes")
        o.min_bytes = parse_size(need(i));
      else if (a == "-e" || a == "--maxbytes")
        o.max_bytes = parse_size(need(i));
      else if (a == "-f" || a == "--stepfactor")
        o.factor = std::strtod(need(i).c_str(), nullptr);
      else if (a == "-n" || a == "--iters")
        o.iters = parse_count(need(i));
      else if (a == "-w" || a == "--warmup_iters")
        o.warmup = parse_count(need(i));
      else if (a == "--iter-bytes")
        o.iter_bytes = parse_size(need(i));
      else if (a == "-c" || a == "--check")
        o.check = parse_count(need(i)) != 0;
      else if (a == "--agree")
        o.agree = parse_count(need(i)) != 0;
      else if (a == "--verify")
        o.verify = parse_count(need(i)) != 0;
      else if (a == "--check-finite")
        o.check_finite = parse_count(need(i)) != 0;
      else if (a == "--interleave")
        o.interleave = true;
      else if (a == "--p2p")
        o.p2p = true;
      else if (a == "--mpi-stage")
        o.mpi_stage = parse_size(need(i));
      else if (a == "--network-message-bytes") {
        const std::string v = need(i);
        o.net_msg = v == "auto" ? net_msg_auto : parse_size(v);
      } else if (a == "-d" || a == "--datatype")
        o.type = parse_dtype(need(i));
      else if (a == "-o" || a == "--op")
        o.op = parse_op(need(i));
      else if (a == "--transport")
        o.transports = split_list(need(i));
      else if (a == "--algo")
        o.algos = split_list(need(i));
      else if (a == "--ranks")
        o.ranks = parse_count(need(i));
      else if (a == "--node-ranks")
        o.node_ranks = parse_count(need(i));
      else if (a == "--peers")
        o.peers = split_list(need(i));
      else if (a == "--gloo-iface")
        o.gloo_iface = need(i);
      else if (a == "--gloo-algos")
        o.gloo_algos = need(i);
      else if (a == "--stream-bytes")
        o.stream_bytes = parse_size(need(i));
      else if (a == "--csv")
        o.csv = need(i);
      else if (a == "--self-test-corrupt")
        o.corrupt = true;
      else if (a == "--require-gradsync")
        o.require_gradsync = parse_count(need(i));
      else if (a == "-h" || a == "--help")
        o.help = true;
      else if (a == "--version")
        o.version = true;
      else
        known = false;
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(a + ": " + e.what());
    }
    if (!known) throw std::invalid_argument("unknown option '" + a + "'");
    if (o.help || o.version) return o;
  }
  if (o.factor <= 1.0) throw std::invalid_argument("-f must be greater than 1");
  if (o.min_bytes == 0 || o.max_bytes < o.min_bytes)
    throw std::invalid_argument("need 0 < -b <= -e");
  if (o.iters == 0) throw std::invalid_argument("-n must be at least 1");
  if (o.ranks == 0) throw std::invalid_argument("--ranks must be at least 1");
  if (o.algos.size() == 1 && o.algos[0] == "all") o.algos = all_algos;
  if (o.peers.size() == 1 && o.peers[0] == "all") o.peers = all_peers;
  if (o.peers.size() == 1 && o.peers[0] == "none") o.peers.clear();
  if (o.transports.size() == 1 && o.transports[0] == "all") o.transports = all_transports;
  auto known = [](const std::vector<std::string>& names, const std::vector<std::string>& allowed,
                  const char* what) {
    for (const auto& n : names) {
      bool ok = false;
      for (const auto& a : allowed) ok = ok || a == n;
      if (!ok && n != "none")
        throw std::invalid_argument(std::string("unknown ") + what + " '" + n + "'");
    }
  };
  known(o.algos, all_algos, "algorithm");
  known(o.transports, all_transports, "transport");
  known(o.peers, all_peers, "peer");
  check_type_op(o);
  return o;
}

/// The message sizes of the sweep: min, min*f, ... <= max (each rounded down to whole
/// elements of `elem` bytes, duplicates and zero sizes dropped).
inline std::vector<std::size_t> sweep_sizes(const options& o, std::size_t elem) {
  std::vector<std::size_t> out;
  for (double b = static_cast<double>(o.min_bytes);
       b <= static_cast<double>(o.max_bytes) * 1.0000001; b *= o.factor) {
    const std::size_t bytes = static_cast<std::size_t>(b) / elem * elem;
    if (bytes && (out.empty() || out.back() != bytes)) out.push_back(bytes);
  }
  return out;
}

/// Timed iterations at `bytes` (all ranks compute the same number).
inline std::size_t iters_for(const options& o, std::size_t bytes) {
  if (o.iter_bytes == 0 || bytes == 0) return o.iters;
  const std::size_t cap = std::max<std::size_t>(3, o.iter_bytes / bytes);
  return std::min(o.iters, cap);
}

/// Warm-up calls at a size with `iters` timed iterations: -w, but with --iter-bytes no
/// more than a quarter of the timed iterations (at least 1) at the large sizes.
inline std::size_t warmup_for(const options& o, std::size_t iters) {
  if (o.iter_bytes == 0 || o.warmup == 0) return o.warmup;
  return std::min(o.warmup, std::max<std::size_t>(1, iters / 4));
}

}  // namespace gradsync::bench
