// SPDX-License-Identifier: Apache-2.0
// torch_trainer's flags: the mini-trainer's (--transport --algo --fusion --bucket-mb
// --compress --ranks --epochs --batch --seed --quiet --help --version) plus the model,
// the synchronisation pattern and the data. Parsed with the mini-trainer's number parsers,
// so a bad value exits 2 naming the flag in both programs alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "../mini_trainer/config.hpp"

namespace torch_trainer {

using mini_trainer::usage_error;

struct config {
  std::string model = "cnn";        // cnn | transformer
  std::string sync = "overlap";     // overlap | per-parameter
  std::string transport = "local";  // local | shm | mpi | two_level
  std::string algo = "auto";        // ring | auto (auto_select); hierarchical on two_level
  std::string fusion = "bucket";    // none | bucket (zero-copy arena; packed for powersgd)
  double bucket_mb = 25.0;          // bucket cap, MiB (DDP's default)
  std::string compress = "none";    // none | fp16 | bf16 | int8 | topk | powersgd
  bool error_feedback = true;       // int8 / topk / powersgd carry what they drop
  std::size_t ranks = 1;            // in-process ranks (local, shm)
  std::size_t node_ranks = 0;       // two_level: ranks per node; 0 = one node per host
  std::size_t epochs = 1;
  std::size_t batch = 0;  // global batch; 0: the model's default (64 / 32)
  double lr = 0;          // 0: the model's default (SGD 0.02 / AdamW 1e-3)
  std::uint64_t seed = 1;
  std::size_t limit = 0;            // training samples (sequences) per epoch; 0 = all
  std::size_t threads = 1;          // torch intra-op threads per rank
  std::size_t check_replicas = 0;   // steps between replica hash checks; 0 = epoch ends
  std::string data_dir;             // "": the model's default directory
  std::size_t progress_every = 50;  // steps between progress lines; 0 = none
  bool quiet = false;
  bool help = false;
  bool version = false;
};

inline std::string usage_text() {
  return "usage: torch_trainer [flags]\n"
         "  --model cnn|transformer     CNN on Fashion-MNIST, or a GPT-style character\n"
         "                              language model on Debian's fortunes (cnn)\n"
         "  --sync overlap|per-parameter  gradsync::torch::data_parallel (buckets launched\n"
         "                              during backward), or one blocking allreduce per\n"
         "                              parameter after backward, as libtorch's distributed\n"
         "                              example (overlap)\n"
         "  --transport local|shm|mpi|two_level   who moves the bytes (local); mpi and\n"
         "                              two_level are in torch_trainer_openmpi\n"
         "  --algo ring|auto            allreduce algorithm (auto: auto_select); two_level\n"
         "                              always runs hierarchical (auto)\n"
         "  --fusion none|bucket        one collective per tensor, or buckets in gradsync's\n"
         "                              arena (.grad is a view into it) (bucket)\n"
         "  --bucket-mb X               bucket cap in MiB (25)\n"
         "  --compress none|fp16|bf16|int8|topk|powersgd   gradients on the wire (none;\n"
         "                              needs --fusion bucket)\n"
         "  --no-error-feedback         int8 / topk / powersgd drop what they do not send\n"
         "  --ranks N                   in-process ranks for --transport local/shm (1)\n"
         "  --node-ranks K              two_level: K consecutive ranks per node (hosts)\n"
         "  --epochs N (1)  --batch N global batch (cnn 64, transformer 32)\n"
         "  --lr X (cnn: SGD 0.02, momentum 0.9; transformer: AdamW 1e-3)  --seed N (1)\n"
         "  --limit N                   training samples (sequences) per epoch (all)\n"
         "  --threads N                 torch intra-op threads per rank (1)\n"
         "  --check-replicas N          compare the ranks' weights every N steps (at each\n"
         "                              epoch's end)\n"
         "  --data DIR                  Fashion-MNIST IDX .gz files\n"
         "                              (/usr/share/datasets/fashion-mnist), or a directory\n"
         "                              of text files (/usr/share/games/fortunes)\n"
         "  --progress-every N          steps between progress lines (50; 0 = off)\n"
         "  --quiet                     print only the final line\n"
         "  --help, --version           print this text, or the version, and exit 0\n";
}

/// Parses argv; throws usage_error naming the flag on anything it cannot use.
inline config parse_args(int argc, char** argv) {
  using mini_trainer::detail::parse_double;
  using mini_trainer::detail::parse_uint;
  config c;
  auto one_of = [](std::string_view flag, const std::string& v,
                   std::initializer_list<std::string_view> ok) {
    std::string list;
    for (auto o : ok) {
      if (v == o) return v;
      list += (list.empty() ? "" : ", ") + std::string(o);
    }
    throw usage_error(std::string(flag) + " must be one of " + list + ", got '" + v + "'");
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--model") {
      c.model = one_of(a, value(), {"cnn", "transformer"});
    } else if (a == "--sync") {
      c.sync = one_of(a, value(), {"overlap", "per-parameter"});
    } else if (a == "--transport") {
      c.transport = one_of(a, value(), {"local", "shm", "mpi", "two_level"});
    } else if (a == "--algo") {
      c.algo = one_of(a, value(), {"ring", "auto", "auto_select", "hierarchical"});
      if (c.algo == "auto_select" || c.algo == "hierarchical") c.algo = "auto";
    } else if (a == "--fusion") {
      c.fusion = one_of(a, value(), {"none", "bucket"});
    } else if (a == "--bucket-mb") {
      c.bucket_mb = parse_double(a, value());
      if (!(c.bucket_mb > 0 && c.bucket_mb <= 4096)) {
        throw usage_error("--bucket-mb must be in (0, 4096] MiB");
      }
    } else if (a == "--compress") {
      c.compress = one_of(a, value(), {"none", "fp16", "bf16", "int8", "topk", "powersgd"});
    } else if (a == "--no-error-feedback") {
      c.error_feedback = false;
    } else if (a == "--ranks") {
      c.ranks = parse_uint(a, value());
      if (c.ranks < 1 || c.ranks > 64) throw usage_error("--ranks must be in 1..64");
    } else if (a == "--node-ranks") {
      c.node_ranks = parse_uint(a, value());
      if (c.node_ranks > 4096) throw usage_error("--node-ranks must be at most 4096");
    } else if (a == "--epochs") {
      c.epochs = parse_uint(a, value());
    } else if (a == "--batch") {
      c.batch = parse_uint(a, value());
      if (c.batch < 1 || c.batch > (1u << 20)) throw usage_error("--batch must be in 1..2^20");
    } else if (a == "--lr") {
      c.lr = parse_double(a, value());
      if (!(c.lr > 0 && c.lr < 100)) throw usage_error("--lr must be in (0, 100)");
    } else if (a == "--seed") {
      c.seed = parse_uint(a, value());
    } else if (a == "--limit") {
      c.limit = parse_uint(a, value());
    } else if (a == "--threads") {
      c.threads = parse_uint(a, value());
      if (c.threads < 1 || c.threads > 256) throw usage_error("--threads must be in 1..256");
    } else if (a == "--check-replicas") {
      c.check_replicas = parse_uint(a, value());
    } else if (a == "--data") {
      c.data_dir = value();
    } else if (a == "--progress-every") {
      c.progress_every = parse_uint(a, value());
    } else if (a == "--quiet") {
      c.quiet = true;
    } else if (a == "--help" || a == "-h") {
      c.help = true;
    } else if (a == "--version") {
      c.version = true;
    } else {
      throw usage_error("unknown flag '" + std::string(a) + "'\n" + usage_text());
    }
  }
  if (c.compress != "none" && c.fusion != "bucket") {
    throw usage_error("--compress " + c.compress + " needs --fusion bucket");
  }
  if (c.sync == "per-parameter" && c.compress != "none") {
    throw usage_error("--sync per-parameter sends each gradient as it is; drop --compress");
  }
  if (c.batch == 0) c.batch = c.model == "cnn" ? 64 : 32;
  if (c.lr == 0) c.lr = c.model == "cnn" ? 0.02 : 1e-3;
  if (c.data_dir.empty()) {
    c.data_dir =
        c.model == "cnn" ? "/usr/share/datasets/fashion-mnist" : "/usr/share/games/fortunes";
  }
  return c;
}

/// --algo and --fusion and --compress as one key of the dispatch table.
inline std::string composition_key(const config& c) {
  std::string k = c.algo + "/" + c.fusion + "/" + c.compress;
  if (c.compress != "none" && c.compress != "fp16" && c.compress != "bf16" && c.error_feedback) {
    k += "+ef";
  }
  return k;
}

}  // namespace torch_trainer
