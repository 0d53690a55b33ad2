// SPDX-License-Identifier: Apache-2.0
// Checkpoints: model, optimizer state (momentum), RNG state, data position and the
// running epoch statistics, in one self-checking file. Written atomically: a temporary
// file in the same directory, fsync, rename to ckpt-<global step>.bin, fsync of the
// directory; on any failure the temporary file is removed, so no partial checkpoint is
// ever left behind. The two newest checkpoints are kept, so that --resume falls back to
// the older one when the newest does not load (load_for_resume).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include <gradsync/testing/exact_inputs.hpp>

#include "config.hpp"
#include "model.hpp"
#include "rng.hpp"

namespace mini_trainer {

/// The arithmetic modes a checkpoint records: --exact-grads in bit 0, the micro-batch
/// count of --reproducible above it (0: not reproducible).
inline std::uint64_t exact_mode(const config& c) {
  return (c.exact_grads ? 1u : 0u) | (c.reproducible ? std::uint64_t{c.micro_batches} << 1 : 0);
}

/// Everything needed to continue a run as if it had never stopped.
struct train_state {
  std::vector<std::size_t> dims;  // model shape
  std::uint64_t batch = 0, seed = 0;
  std::uint64_t exact = 0;  // bit 0: --exact-grads; above: --reproducible's micro-batches
  float lr = 0, momentum = 0;
  std::uint64_t epoch = 0;          // epoch in progress (0-based)
  std::uint64_t step_in_epoch = 0;  // global batches of `epoch` already applied
  std::uint64_t global_step = 0;
  rng::state_type epoch_rng{};  // RNG state before `epoch`'s shuffle was drawn
  std::uint64_t ranks = 0;      // how many ranks wrote it
  std::string algo, fusion, transport;
  double loss_sum = 0, correct = 0, seen = 0;  // running statistics of `epoch`
  double last_test_acc = -1;                   // < 0: no evaluation yet
  double last_loss = -1;                       // mean loss of the last finished epoch
  std::vector<float> params, momentum_buf;
};

namespace detail {

constexpr char ckpt_magic[8] = {'G', 'S', 'T', 'R', 'A', 'I', 'N', '1'};

struct byte_writer {
  std::vector<unsigned char> b;
  void raw(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    b.insert(b.end(), c, c + n);
  }
  template <class T>
  void put(const T& v) {
    raw(&v, sizeof v);
  }
  void str(const std::string& s) {
    put<std::uint64_t>(s.size());
    raw(s.data(), s.size());
  }
};

struct byte_reader {
  const std::vector<unsigned char>& b;
  const std::string& path;
  std::size_t pos = 0;
  void raw(void* p, std::size_t n) {
    if (n > b.size() - pos) {
      throw usage_error("checkpoint " + path + " is truncated (" + std::to_string(b.size()) +
                        " bytes)");
    }
    std::memcpy(p, b.data() + pos, n);
    pos += n;
  }
  template <class T>
  T get() {
    T v;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() {
    const auto n = get<std::uint64_t>();
    if (n > 256) throw usage_error("checkpoint " + path + " is corrupt (string length)");
    std::string s(n, '\0');
    raw(s.data(), n);
    return s;
  }
};

inline std::string sys_err(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

inline bool parse_ckpt_name(const std::string& name, std::uint64_t& step) {
  if (name.size() < 10 || name.rfind("ckpt-", 0) != 0 || name.substr(name.size() - 4) != ".bin")
    return false;
  const std::string digits = name.substr(5, name.size() - 9);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  // A step past 2^64 - 1 is no checkpoint of ours: skipped like any foreign name.
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return ec == std::errc() && end == digits.data() + digits.size();
}

}  // namespace detail

inline std::vector<unsigned char> serialize(const train_state& s) {
  detail::byte_writer w;
  w.raw(detail::ckpt_magic, 8);
  w.put<std::uint32_t>(1);  // format version
  w.put<std::uint64_t>(s.dims.size());
  for (auto d : s.dims) w.put<std::uint64_t>(d);
  w.put(s.batch), w.put(s.seed), w.put(s.exact), w.put(s.lr), w.put(s.momentum);
  w.put(s.epoch), w.put(s.step_in_epoch), w.put(s.global_step);
  for (auto x : s.epoch_rng) w.put(x);
  w.put(s.ranks);
  w.str(s.algo), w.str(s.fusion), w.str(s.transport);
  w.put(s.loss_sum), w.put(s.correct), w.put(s.seen), w.put(s.last_test_acc), w.put(s.last_loss);
  w.put<std::uint64_t>(s.params.size());
  w.raw(s.params.data(), s.params.size() * sizeof(float));
  w.raw(s.momentum_buf.data(), s.momentum_buf.size() * sizeof(float));
  w.put(gradsync::testing::fnv1a64(w.b.data(), w.b.size()));
  return w.b;
}

inline train_state deserialize(const std::vector<unsigned char>& b, const std::string& path) {
  if (b.size() < 16 || std::memcmp(b.data(), detail::ckpt_magic, 8) != 0) {
    throw usage_error("checkpoint " + path + " is not a mini_trainer checkpoint (bad magic)");
  }
  std::uint64_t stored;
  std::memcpy(&stored, b.data() + b.size() - 8, 8);
  if (gradsync::testing::fnv1a64(b.data(), b.size() - 8) != stored) {
    throw usage_error("checkpoint " + path + " is corrupt (checksum mismatch)");
  }
  detail::byte_reader r{b, path, 8};
  if (r.get<std::uint32_t>() != 1) throw usage_error("checkpoint " + path + ": unknown version");
  train_state s;
  const auto nd = r.get<std::uint64_t>();
  if (nd < 2 || nd > 16) throw usage_error("checkpoint " + path + " is corrupt (layer count)");
  // Widths and the parameter count are checked before anything is sized from them: the
  // checksum only proves the bytes are as written, not that a writer was sane.
  std::uint64_t count = 0;
  for (std::uint64_t i = 0; i < nd; ++i) {
    const auto d = r.get<std::uint64_t>();
    if (d == 0 || d > detail::max_params) {
      throw usage_error("checkpoint " + path + " is corrupt (layer " + std::to_string(i) +
                        " has width " + std::to_string(d) + ")");
    }
    std::uint64_t layer = 0;
    if (i > 0 && (__builtin_mul_overflow(d, s.dims.back() + 1, &layer) ||
                  __builtin_add_overflow(count, layer, &count) || count > detail::max_params)) {
      throw usage_error("checkpoint " + path + " is corrupt (more than " +
                        std::to_string(detail::max_params) + " parameters)");
    }
    s.dims.push_back(d);
  }
  s.batch = r.get<std::uint64_t>(), s.seed = r.get<std::uint64_t>();
  s.exact = r.get<std::uint64_t>();
  s.lr = r.get<float>(), s.momentum = r.get<float>();
  s.epoch = r.get<std::uint64_t>(), s.step_in_epoch = r.get<std::uint64_t>();
  s.global_step = r.get<std::uint64_t>();
  for (auto& x : s.epoch_rng) x = r.get<std::uint64_t>();
  s.ranks = r.get<std::uint64_t>();
  s.algo = r.str(), s.fusion = r.str(), s.transport = r.str();
  s.loss_sum = r.get<double>(), s.correct = r.get<double>(), s.seen = r.get<double>();
  s.last_test_acc = r.get<double>(), s.last_loss = r.get<double>();
  const auto n = r.get<std::uint64_t>();
  if (n != count || n != mlp_shape{s.dims}.param_count()) {
    throw usage_error("checkpoint " + path + " is corrupt (parameter count)");
  }
  if (b.size() - 8 - r.pos != 2 * n * sizeof(float)) {  // before 2 n floats are allocated
    throw usage_error("checkpoint " + path + " is corrupt (" + std::to_string(n) +
                      " parameters, but " + std::to_string(b.size() - 8 - r.pos) +
                      " bytes of weights and momentum)");
  }
  s.params.resize(n), s.momentum_buf.resize(n);
  r.raw(s.params.data(), n * sizeof(float));
  r.raw(s.momentum_buf.data(), n * sizeof(float));
  return s;
}

/// Creates `dir` if needed and proves it writable by creating and removing a file;
/// called before training starts so a bad directory fails in the first second. With
/// `resume` the directory must exist already: a mistyped one would otherwise be created
/// empty and the run would start from scratch.
inline void check_checkpoint_dir(const std::string& dir, bool resume = false) {
  std::error_code ec;
  if (resume && !std::filesystem::is_directory(dir, ec)) {
    throw usage_error("--resume: checkpoint directory " + dir + " does not exist" +
                      (std::filesystem::exists(dir, ec) ? " (it is not a directory)" : "") +
                      "; resuming needs the directory an earlier run with --checkpoint wrote "
                      "(without --resume a run starts fresh and creates it)");
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) throw usage_error("cannot create checkpoint directory " + dir + ": " + ec.message());
  const std::string probe = dir + "/.probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0) {
    throw usage_error(
        detail::sys_err("checkpoint directory is not writable: cannot create", probe));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  // A run killed while writing leaves its temporary file: it was never renamed into
  // place, so it is not a checkpoint; remove it (one trainer per directory).
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".ckpt-", 0) == 0 && name.find(".tmp.") != std::string::npos) {
      std::filesystem::remove(e.path(), ec);
    }
  }
}

/// Writes `s` as <dir>/ckpt-<global_step>.bin atomically; returns the path.
inline std::string save_checkpoint(const std::string& dir, const train_state& s) {
  const auto bytes = serialize(s);
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%010llu.bin",
                static_cast<unsigned long long>(s.global_step));
  const std::string final_path = dir + "/" + name;
  const std::string tmp = dir + "/." + name + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0) throw usage_error(detail::sys_err("cannot create checkpoint file", tmp));
  auto fail = [&](const std::string& what) {
    const std::string msg = detail::sys_err(what, tmp);
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw usage_error(msg);
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write checkpoint file");
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail("cannot fsync checkpoint file");
  if (::close(fd) != 0) {
    const std::string msg = detail::sys_err("cannot close checkpoint file", tmp);
    ::unlink(tmp.c_str());
    throw usage_error(msg);
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const std::string msg = detail::sys_err("cannot rename checkpoint into place:", final_path);
    ::unlink(tmp.c_str());
    throw usage_error(msg);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  // Keep the two newest.
  std::vector<std::uint64_t> steps;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::uint64_t st;
    if (detail::parse_ckpt_name(e.path().filename().string(), st)) steps.push_back(st);
  }
  std::sort(steps.begin(), steps.end());
  for (std::size_t i = 0; i + 2 < steps.size(); ++i) {
    std::snprintf(name, sizeof name, "ckpt-%010llu.bin", static_cast<unsigned long long>(steps[i]));
    ::unlink((dir + "/" + name).c_str());
  }
  return final_path;
}

/// Paths of the ckpt-*.bin files in `dir`, newest (highest global step) first.
inline std::vector<std::string> checkpoints_newest_first(const std::string& dir) {
  std::error_code ec;
  std::vector<std::pair<std::uint64_t, std::string>> found;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::uint64_t st;
    if (detail::parse_ckpt_name(e.path().filename().string(), st)) {
      found.emplace_back(st, e.path().string());
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

/// Path of the newest ckpt-*.bin in `dir`, or "" when there is none.
inline std::string latest_checkpoint(const std::string& dir) {
  const auto all = checkpoints_newest_first(dir);
  return all.empty() ? std::string() : all.front();
}

inline train_state load_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw usage_error(detail::sys_err("cannot open checkpoint", path));
  std::vector<unsigned char> b((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  return deserialize(b, path);
}

/// What --resume continues from: the newest checkpoint in `dir` that loads, its path in
/// `path`. A newer one that does not load (cut short, a flipped bit) is named on `log`
/// and the older one, kept for this, is tried; when none loads the newest's error is
/// thrown. Returns false, saying on `log` that the run starts fresh, when `dir` holds no
/// checkpoint (an elastic relaunch before the first one was written).
inline bool load_for_resume(const std::string& dir, train_state& out, std::string& path,
                            std::FILE* log = stderr) {
  const auto all = checkpoints_newest_first(dir);
  if (all.empty()) {
    std::fprintf(log, "--resume: no checkpoint (ckpt-*.bin) in %s: starting fresh\n", dir.c_str());
    return false;
  }
  std::string first_error;
  for (std::size_t i = 0; i < all.size(); ++i) {
    try {
      out = load_checkpoint(all[i]);
      path = all[i];
      return true;
    } catch (const usage_error& e) {
      if (i == 0) first_error = e.what();
      if (i + 1 < all.size()) {
        std::fprintf(log, "--resume: %s; resuming from the older %s instead\n", e.what(),
                     all[i + 1].c_str());
      }
    }
  }
  throw usage_error(first_error + (all.size() > 1
                                       ? "; no older checkpoint in " + dir + " loads either"
                                       : std::string()));
}

/// Refuses a checkpoint whose arithmetic-defining settings differ from this run's.
inline void check_compatible(const train_state& s, const std::string& path, const config& c,
                             const mlp_shape& shape) {
  if (s.dims != shape.dims) {
    throw usage_error("checkpoint " + path + " holds a model of shape " + mlp_shape{s.dims}.str() +
                      " but this run builds " + shape.str() + " (check --hidden)");
  }
  if (s.batch != c.batch) {
    throw usage_error("checkpoint " + path + " was trained with global batch " +
                      std::to_string(s.batch) + " but this run uses --batch " +
                      std::to_string(c.batch) + " (the data position is counted in batches)");
  }
  if (s.seed != c.seed) {
    throw usage_error("checkpoint " + path + " was trained with --seed " + std::to_string(s.seed) +
                      " but this run uses --seed " + std::to_string(c.seed));
  }
  if (((s.exact & 1) != 0) != c.exact_grads) {
    throw usage_error("checkpoint " + path + ((s.exact & 1) ? " was" : " was not") +
                      " trained with --exact-grads; pass the same mode to resume");
  }
  if (s.exact >> 1 != exact_mode(c) >> 1) {
    const auto mode = [](std::uint64_t m) {
      return m ? "--reproducible --micro-batches " + std::to_string(m)
               : std::string("no --reproducible");
    };
    throw usage_error("checkpoint " + path + " was trained with " + mode(s.exact >> 1) +
                      ", this run uses " + mode(exact_mode(c) >> 1) +
                      " (the gradient's arithmetic); pass the same to resume");
  }
}

}  // namespace mini_trainer
