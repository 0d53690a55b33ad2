// SPDX-License-Identifier: Apache-2.0
// Command-line flags of the mini-trainer and their validation. Every flag that changes
// the arithmetic (model shape, global batch, seed, exact mode) is also recorded in the
// checkpoint, so a resume with different values is refused with a message naming both.
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/algo/list.hpp>

namespace mini_trainer {

/// A bad flag, a bad file or a bad checkpoint: the message says what and where.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct config {
  std::string transport = "local";  // local | shm | mpi | two_level
  std::string algo = "ring";        // a name of gradsync::algo::host_algorithms, or direct
  std::string fusion = "none";      // none | bucket
  double bucket_mb = 1.0;           // bucket size in MiB for --fusion bucket
  std::string compress = "none";    // none | fp16 | bf16 | int8 | topk | powersgd (bucket)
  std::size_t topk_permille = 10;   // --compress topk: thousandths sent (1, 10)
  std::size_t powersgd_rank = 4;    // --compress powersgd: rank of the factors (1, 4)
  bool error_feedback = true;       // int8 / topk carry what they drop to the next step
  std::size_t ranks = 1;            // in-process ranks (local, shm)
  std::size_t node_ranks = 0;       // two_level: ranks per node; 0 = one node per host
  std::size_t epochs = 2;
  std::size_t batch = 128;  // global batch, split across ranks
  float lr = 0.02f;
  float momentum = 0.9f;
  std::uint64_t seed = 1;
  std::vector<std::size_t> hidden = {256, 128};  // hidden layer widths
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::size_t limit = 0;             // use only the first N training (and test) samples; 0 = all
  std::string checkpoint_dir;        // empty: no checkpoints
  std::size_t checkpoint_every = 0;  // global steps between checkpoints; 0 = epoch ends only
  bool resume = false;
  bool exact_grads = false;          // quantized math so gradient sums are exact (tests)
  bool reproducible = false;         // gradients as exact integer sums of micro-batches
  std::size_t micro_batches = 8;     // --reproducible: contributions per global batch
  bool shard_optimizer = false;      // reduce-scatter grads, update a shard, allgather weights
  bool seed_per_rank = false;        // each rank draws its start from seed + rank (tests)
  std::size_t progress_every = 100;  // steps between progress lines; 0 = none
  bool print_grad_hash = false;      // print the synced gradient's hash every step (tests)
  std::size_t stop_after = 0;        // stop after this many global steps (tests); 0 = never
  long inject_divergence = -1;       // rank whose weights get perturbed (tests); -1 = none
  std::size_t throttle_ms = 0;       // sleep per step (tests: a kill lands mid-run)
  bool quiet = false;                // only errors and the final line
  bool help = false;                 // --help: print the usage to stdout, exit 0
  bool version = false;              // --version: print the version, exit 0
};

/// --algo's choices: gradsync's host algorithm list (algo/list.hpp), in lines of the
/// usage text's second column.
inline std::string algorithm_choices() {
  const std::string indent(30, ' ');
  std::string s = indent, line;
  for (std::string_view n : gradsync::algo::algorithm_names<gradsync::algo::host_algorithms>()) {
    if (!line.empty() && line.size() + 1 + n.size() > 56) {
      s += line + "\n" + indent;
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += n;
  }
  return s + line;
}

inline std::string usage_text() {
  return "usage: mini_trainer [flags]\n"
         "  --transport local|shm|mpi|two_level   who moves the bytes (default local);\n"
         "                              two_level: shm in the node, mpi across (--algo "
         "hierarchical)\n"
         "  --algo NAME                 allreduce algorithm (ring), one of:\n" +
         algorithm_choices() +
         "\n"
         "                              (direct = direct_two_shot; hierarchical* need two_level,\n"
         "                              direct* need shm, native needs mpi)\n"
         "  --fusion none|bucket        one allreduce per tensor, or bucketed (none)\n"
         "  --bucket-mb X               bucket size in MiB for --fusion bucket, any size (1)\n"
         "  --compress none|fp16|bf16|int8|topk|powersgd   gradients on the wire (none;\n"
         "                              needs --fusion bucket): 16-bit casts, int8 codes,\n"
         "                              the top-k, or rank-r factors of each weight matrix\n"
         "  --topk-permille 1|10        --compress topk: thousandths of each bucket sent (10)\n"
         "  --powersgd-rank 1|4         --compress powersgd: rank of the factors (4)\n"
         "  --no-error-feedback         int8 / topk / powersgd drop what they do not send\n"
         "                              (default: carry it into the next step)\n"
         "  --ranks N                   in-process ranks for --transport local/shm (1)\n"
         "  --node-ranks K              two_level: K consecutive ranks per node (default: "
         "hosts)\n"
         "  --epochs N (2)  --batch N global batch (128)  --lr X (0.02)  --momentum X (0.9)\n"
         "  --seed N (1)    --hidden A,B hidden layer widths (256,128)\n"
         "  --data DIR                  Fashion-MNIST IDX .gz files\n"
         "                              (/usr/share/datasets/fashion-mnist)\n"
         "  --limit N                   use the first N training and test samples\n"
         "  --checkpoint DIR --checkpoint-every K   atomic checkpoints every K steps\n"
         "  --resume                    continue from the latest checkpoint in DIR\n"
         "  --exact-grads               exactly summable gradients (test mode)\n"
         "  --reproducible              the same weights for any rank count, transport,\n"
         "                              algorithm and bucket size: each micro-batch's\n"
         "                              gradient is summed as exact integer codes\n"
         "                              (compress::exact_accumulator); ordinary float math\n"
         "  --micro-batches M           --reproducible: the global batch in M fixed parts,\n"
         "                              shared by the ranks (8; at least the rank count)\n"
         "  --shard-optimizer           each rank updates 1/n of the weights and keeps that\n"
         "                              shard's momentum: reduce-scatter the gradients,\n"
         "                              allgather the weights (ZeRO-1; --fusion none only)\n"
         "  --progress-every N          steps between progress lines (100; 0 = off)\n"
         "  --quiet                     print only the final line\n"
         "  --help, --version           print this text, or the version, and exit 0\n"
         "test hooks: --print-grad-hash --stop-after STEPS --inject-divergence RANK --throttle-ms "
         "MS\n"
         "  --seed-per-rank (rank r draws its start from seed + r; rank 0's is broadcast)\n";
}

namespace detail {

/// A decimal integer in [0, max], digits only: strtoull alone skips leading blanks, reads
/// " -1" as 2^64 - 1 and saturates what overflows (ERANGE).
inline std::uint64_t parse_uint(std::string_view flag, const std::string& v,
                                std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
  const bool digits =
      !v.empty() && std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!digits) {
    throw usage_error(std::string(flag) + " needs a non-negative integer, got '" + v + "'");
  }
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), nullptr, 10);
  if (errno == ERANGE || x > max) {
    throw usage_error(std::string(flag) + " must be at most " + std::to_string(max) + ", got '" +
                      v + "'");
  }
  return x;
}

/// A finite number (no leading blanks, no NaN or infinity, nor a value that overflows).
inline double parse_double(std::string_view flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const double x = v.empty() || std::isspace(static_cast<unsigned char>(v[0]))
                       ? std::nan("")
                       : std::strtod(v.c_str(), &end);
  if (!end || *end != '\0' || errno == ERANGE || !std::isfinite(x)) {
    throw usage_error(std::string(flag) + " needs a finite number, got '" + v + "'");
  }
  return x;
}

/// A finite number that a float holds (--lr, --momentum).
inline float parse_float(std::string_view flag, const std::string& v) {
  const double x = parse_double(flag, v);
  if (std::fabs(x) > std::numeric_limits<float>::max()) {
    throw usage_error(std::string(flag) + " is out of float's range, got '" + v + "'");
  }
  return static_cast<float>(x);
}

/// Ranks, node sizes and rank numbers: MPI counts them in int, and the trainer casts.
inline constexpr std::uint64_t max_ranks = std::numeric_limits<int>::max();
/// The largest model --hidden may build: 2^31 parameters (8 GiB per copy of the weights;
/// a rank keeps weights, gradients and momentum). Checked before anything is allocated,
/// so a width that would wrap the count cannot size a buffer.
inline constexpr std::uint64_t max_params = std::uint64_t{1} << 31;

/// Parameters of the MLP {784, hidden..., 10} (weights and biases), or max_params + 1
/// when there are more than max_params (the product or the sum would wrap).
inline std::uint64_t param_count(const std::vector<std::size_t>& hidden) {
  std::vector<std::uint64_t> dims{784};
  dims.insert(dims.end(), hidden.begin(), hidden.end());
  dims.push_back(10);
  std::uint64_t total = 0;
  for (std::size_t l = 0; l + 1 < dims.size(); ++l) {
    std::uint64_t layer = 0;
    if (dims[l] >= max_params || __builtin_mul_overflow(dims[l + 1], dims[l] + 1, &layer) ||
        __builtin_add_overflow(total, layer, &total) || total > max_params) {
      return max_params + 1;
    }
  }
  return total;
}

inline bool is_pow2(std::size_t x) {
  return x && !(x & (x - 1));
}

}  // namespace detail

/// Parses argv over the defaults `c`; throws usage_error naming the flag on anything it
/// cannot use (an unknown flag with the text of `usage`: the CUDA trainer has its own).
inline config parse_args(int argc, char** argv, config c = {},
                         std::string (*usage)() = usage_text) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(std::string(a) + " needs a value");
      return argv[++i];
    };
    using detail::parse_double;
    using detail::parse_uint;
    if (a == "--transport")
      c.transport = value();
    else if (a == "--algo")
      c.algo = value();
    else if (a == "--fusion")
      c.fusion = value();
    else if (a == "--bucket-mb")
      c.bucket_mb = parse_double(a, value());
    else if (a == "--compress")
      c.compress = value();
    else if (a == "--topk-permille")
      c.topk_permille = parse_uint(a, value());
    else if (a == "--powersgd-rank")
      c.powersgd_rank = parse_uint(a, value());
    else if (a == "--no-error-feedback")
      c.error_feedback = false;
    else if (a == "--ranks")
      c.ranks = parse_uint(a, value(), detail::max_ranks);
    else if (a == "--node-ranks")
      c.node_ranks = parse_uint(a, value(), detail::max_ranks);
    else if (a == "--epochs")
      c.epochs = parse_uint(a, value());
    else if (a == "--batch")
      c.batch = parse_uint(a, value());
    else if (a == "--lr")
      c.lr = detail::parse_float(a, value());
    else if (a == "--momentum")
      c.momentum = detail::parse_float(a, value());
    else if (a == "--seed")
      c.seed = parse_uint(a, value());
    else if (a == "--data")
      c.data_dir = value();
    else if (a == "--limit")
      c.limit = parse_uint(a, value());
    else if (a == "--checkpoint")
      c.checkpoint_dir = value();
    else if (a == "--checkpoint-every")
      c.checkpoint_every = parse_uint(a, value());
    else if (a == "--resume")
      c.resume = true;
    else if (a == "--exact-grads")
      c.exact_grads = true;
    else if (a == "--reproducible")
      c.reproducible = true;
    else if (a == "--micro-batches")
      c.micro_batches = parse_uint(a, value(), 256);  // compress::exact_accumulator's default
    else if (a == "--progress-every")
      c.progress_every = parse_uint(a, value());
    else if (a == "--shard-optimizer")
      c.shard_optimizer = true;
    else if (a == "--seed-per-rank")
      c.seed_per_rank = true;
    else if (a == "--print-grad-hash")
      c.print_grad_hash = true;
    else if (a == "--stop-after")
      c.stop_after = parse_uint(a, value());
    else if (a == "--inject-divergence")
      c.inject_divergence = static_cast<long>(parse_uint(a, value(), detail::max_ranks - 1));
    else if (a == "--throttle-ms")
      c.throttle_ms = parse_uint(a, value(), 86'400'000);  // a day: chrono's ms must not wrap
    else if (a == "--quiet")
      c.quiet = true;
    else if (a == "--hidden") {
      c.hidden.clear();
      const std::string v = value();
      std::size_t pos = 0;
      while (pos <= v.size()) {
        const std::size_t comma = std::min(v.find(',', pos), v.size());
        const std::uint64_t w = parse_uint(a, v.substr(pos, comma - pos));
        if (w == 0) throw usage_error("--hidden widths must be positive, got '" + v + "'");
        c.hidden.push_back(w);
        pos = comma + 1;
      }
    } else if (a == "--help" || a == "-h") {
      c.help = true;
      return c;
    } else if (a == "--version") {
      c.version = true;
      return c;
    } else {
      throw usage_error("unknown flag '" + std::string(a) + "'\n" + usage());
    }
  }
  if (c.batch == 0) throw usage_error("--batch must be positive");
  if (c.ranks == 0) throw usage_error("--ranks must be positive");
  if (c.epochs == 0) throw usage_error("--epochs must be positive");
  if (c.fusion != "none" && c.fusion != "bucket") {
    throw usage_error("--fusion must be none or bucket, got '" + c.fusion + "'");
  }
  if (!(c.bucket_mb >= 1.0 / 1024 && c.bucket_mb <= 65536)) {
    throw usage_error("--bucket-mb must be between 1/1024 (1 KiB) and 65536 (64 GiB), got " +
                      std::to_string(c.bucket_mb));
  }
  if (detail::param_count(c.hidden) > detail::max_params) {
    std::string widths;
    for (std::size_t w : c.hidden) {
      if (!widths.empty()) widths += ',';
      widths += std::to_string(w);
    }
    throw usage_error("--hidden " + widths + " builds a model of more than " +
                      std::to_string(detail::max_params) + " parameters");
  }
  if (c.compress != "none" && c.compress != "fp16" && c.compress != "bf16" &&
      c.compress != "int8" && c.compress != "topk" && c.compress != "powersgd") {
    throw usage_error("--compress must be none, fp16, bf16, int8, topk or powersgd, got '" +
                      c.compress + "'");
  }
  if (c.compress != "none" && c.fusion != "bucket") {
    throw usage_error("--compress " + c.compress +
                      " needs --fusion bucket (compression runs in the allreducer, which keeps "
                      "its state per bucket)");
  }
  if (c.shard_optimizer && (c.fusion != "none" || c.compress != "none")) {
    throw usage_error(
        "--shard-optimizer reduce-scatters the whole gradient in one call; it "
        "takes no --fusion bucket or --compress");
  }
  if (c.micro_batches == 0) throw usage_error("--micro-batches must be positive");
  if (c.reproducible && c.micro_batches > c.batch) {
    throw usage_error("--micro-batches " + std::to_string(c.micro_batches) +
                      " is more than the global batch of " + std::to_string(c.batch) +
                      " (--batch): every micro-batch needs a sample");
  }
  if (c.reproducible && (c.compress != "none" || c.shard_optimizer)) {
    throw usage_error(std::string("--reproducible sums integer codes through the plain "
                                  "allreduce; it takes no ") +
                      (c.shard_optimizer ? "--shard-optimizer" : "--compress " + c.compress));
  }
  if (c.topk_permille != 1 && c.topk_permille != 10) {
    throw usage_error("--topk-permille must be 1 or 10 (compile-time choices), got " +
                      std::to_string(c.topk_permille));
  }
  if (c.powersgd_rank != 1 && c.powersgd_rank != 4) {
    throw usage_error("--powersgd-rank must be 1 or 4 (compile-time choices), got " +
                      std::to_string(c.powersgd_rank));
  }
  if (c.resume && c.checkpoint_dir.empty()) {
    throw usage_error("--resume needs --checkpoint DIR (where to find the latest checkpoint)");
  }
  if (c.checkpoint_every && c.checkpoint_dir.empty()) {
    throw usage_error("--checkpoint-every needs --checkpoint DIR");
  }
  if (c.exact_grads) {
    // Exactness argument (model.hpp): per-sample products are multiples of 2^-13 below
    // 4 in magnitude, so a batch of <= 512 sums within float's 24-bit significand, and
    // the power-of-two scales n/B and 1/n are exact.
    if (!detail::is_pow2(c.batch) || c.batch > 512) {
      throw usage_error("--exact-grads needs a power-of-two --batch <= 512, got " +
                        std::to_string(c.batch));
    }
  }
  return c;
}

/// Steps per epoch of a run of `cfg` on `ranks` ranks over `train_samples` samples;
/// throws usage_error when the batch cannot be split or exact mode cannot hold.
inline std::size_t checked_steps_per_epoch(const config& cfg, std::size_t ranks,
                                           std::size_t train_samples) {
  const std::size_t B = cfg.batch, n = ranks;
  if (B < n) {
    throw usage_error("--batch " + std::to_string(B) + " is smaller than the " + std::to_string(n) +
                      " ranks; every rank needs at least one sample");
  }
  if (cfg.reproducible && n > cfg.micro_batches) {
    throw usage_error("--reproducible splits the global batch into " +
                      std::to_string(cfg.micro_batches) + " micro-batches (--micro-batches), " +
                      "fewer than the " + std::to_string(n) + " ranks; raise --micro-batches");
  }
  if (cfg.exact_grads && !detail::is_pow2(n)) {
    throw usage_error("--exact-grads needs a power-of-two rank count (1, 2, 4, ...), got " +
                      std::to_string(n));
  }
  if (train_samples / B == 0) {
    throw usage_error("the training set has " + std::to_string(train_samples) +
                      " samples, fewer than one global batch of " + std::to_string(B) +
                      " (--batch)");
  }
  return train_samples / B;
}

/// The compression as dispatch.hpp names its entries: "none", "fp16", "int8", "ef_int8",
/// "topk10", "ef_topk1", ...
inline std::string compress_key(const config& c) {
  if (c.compress == "none" || c.compress == "fp16" || c.compress == "bf16") return c.compress;
  std::string k = (c.error_feedback ? "ef_" : "") + c.compress;
  if (c.compress == "topk") k += std::to_string(c.topk_permille);
  if (c.compress == "powersgd") k += std::to_string(c.powersgd_rank);
  return k;
}

}  // namespace mini_trainer
