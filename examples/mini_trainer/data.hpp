// SPDX-License-Identifier: Apache-2.0
// Fashion-MNIST from gzip IDX files (Debian's dataset-fashion-mnist package). Every
// failure names the file and what was wrong with it: missing, unreadable, not gzip,
// truncated, wrong magic, wrong dimensions, labels out of range, counts that disagree.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <zlib.h>

#include "config.hpp"

namespace mini_trainer {

/// One split of the data set: n images of `pixels` bytes each, and n labels in 0..9.
struct dataset {
  std::size_t n = 0;
  std::size_t pixels = 0;
  std::vector<std::uint8_t> images;  // n * pixels, row-major
  std::vector<std::uint8_t> labels;  // n
};

namespace detail {

class gz_reader {
 public:
  explicit gz_reader(const std::string& path) : path_(path) {
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) {
      throw usage_error("cannot open data file " + path + ": " +
                        (errno ? std::strerror(errno) : "out of memory") +
                        " (install dataset-fashion-mnist with scripts/setup-deps, or pass "
                        "--data DIR)");
    }
    gzbuffer(f_, 1 << 18);
  }
  ~gz_reader() {
    if (f_) gzclose(f_);
  }
  gz_reader(const gz_reader&) = delete;
  gz_reader& operator=(const gz_reader&) = delete;

  /// Reads exactly `bytes`, or throws naming the file and how far it got.
  void read(void* dst, std::size_t bytes, const char* what) {
    auto* p = static_cast<unsigned char*>(dst);
    std::size_t got = 0;
    while (got < bytes) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(bytes - got, 1u << 30));
      const int r = gzread(f_, p + got, chunk);
      if (r < 0) {
        int code = 0;
        const char* msg = gzerror(f_, &code);
        throw usage_error("corrupt data file " + path_ + ": " + msg + " while reading " + what);
      }
      if (r == 0) {
        throw usage_error("corrupt data file " + path_ + ": it ends after " +
                          std::to_string(offset_ + got) + " bytes, in the middle of " + what +
                          " (truncated download?)");
      }
      got += static_cast<std::size_t>(r);
    }
    offset_ += got;
  }

  std::uint32_t read_be32(const char* what) {
    unsigned char b[4];
    read(b, 4, what);
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
           std::uint32_t{b[3]};
  }

  /// Throws if anything but the end of the stream follows.
  void expect_end() {
    unsigned char b;
    const int r = gzread(f_, &b, 1);
    if (r > 0) {
      throw usage_error("corrupt data file " + path_ + ": more bytes than the header announces (" +
                        std::to_string(offset_) + " expected)");
    }
    if (r < 0) {
      int code = 0;
      throw usage_error("corrupt data file " + path_ + ": " + gzerror(f_, &code) + " at its end");
    }
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile f_ = nullptr;
  std::size_t offset_ = 0;
};

}  // namespace detail

/// Loads `<dir>/<prefix>-images-idx3-ubyte.gz` and `<dir>/<prefix>-labels-idx1-ubyte.gz`
/// (prefix "train" or "t10k"); keeps the first `limit` samples when limit > 0.
inline dataset load_split(const std::string& dir, const std::string& prefix, std::size_t limit) {
  dataset d;
  const std::string ipath = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string lpath = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  {
    detail::gz_reader in(ipath);
    const std::uint32_t magic = in.read_be32("the IDX header");
    if (magic != 0x00000803u) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "0x%08x", magic);
      throw usage_error("corrupt data file " + ipath + ": IDX magic is " + buf +
                        ", expected 0x00000803 (unsigned bytes, 3 dimensions)");
    }
    const std::uint32_t n = in.read_be32("the image count");
    const std::uint32_t rows = in.read_be32("the row count");
    const std::uint32_t cols = in.read_be32("the column count");
    if (rows != 28 || cols != 28 || n == 0 || n > 1000000) {
      throw usage_error("corrupt data file " + ipath + ": header says " + std::to_string(n) +
                        " images of " + std::to_string(rows) + "x" + std::to_string(cols) +
                        ", expected 28x28 images");
    }
    d.n = n;
    d.pixels = std::size_t{rows} * cols;
    d.images.resize(d.n * d.pixels);
    in.read(d.images.data(), d.images.size(), "the pixel data");
    in.expect_end();
  }
  {
    detail::gz_reader in(lpath);
    const std::uint32_t magic = in.read_be32("the IDX header");
    if (magic != 0x00000801u) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "0x%08x", magic);
      throw usage_error("corrupt data file " + lpath + ": IDX magic is " + buf +
                        ", expected 0x00000801 (unsigned bytes, 1 dimension)");
    }
    const std::uint32_t n = in.read_be32("the label count");
    if (n != d.n) {
      throw usage_error("data files disagree: " + lpath + " has " + std::to_string(n) +
                        " labels but " + ipath + " has " + std::to_string(d.n) + " images");
    }
    d.labels.resize(n);
    in.read(d.labels.data(), n, "the labels");
    in.expect_end();
    for (std::size_t i = 0; i < n; ++i) {
      if (d.labels[i] > 9) {
        throw usage_error("corrupt data file " + lpath + ": label " + std::to_string(i) + " is " +
                          std::to_string(d.labels[i]) + ", expected 0..9");
      }
    }
  }
  if (limit && limit < d.n) {
    d.n = limit;
    d.images.resize(d.n * d.pixels);
    d.labels.resize(d.n);
  }
  return d;
}

/// Pixels of samples idx[0..m) as floats (byte - 64) / 128: roughly centred and scaled
/// (Fashion-MNIST's pixel mean is 73, its deviation 90), and exact in float (multiples
/// of 2^-7 in [-0.5, 1.5)), which the exact-gradient mode relies on.
inline void gather_batch(const dataset& d, const std::uint32_t* idx, std::size_t m, float* x,
                         std::uint8_t* y) {
  for (std::size_t s = 0; s < m; ++s) {
    const std::uint8_t* src = d.images.data() + std::size_t{idx[s]} * d.pixels;
    float* dst = x + s * d.pixels;
    for (std::size_t p = 0; p < d.pixels; ++p)
      dst[p] = static_cast<float>(int{src[p]} - 64) * 0x1.0p-7f;
    y[s] = d.labels[idx[s]];
  }
}

}  // namespace mini_trainer
