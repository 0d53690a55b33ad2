// SPDX-License-Identifier: Apache-2.0
// fuzz-link: -lz
// Feeds the mini_trainer's Fashion-MNIST reader (load_split) an image file and a label
// file cut from the fuzz input (gzip or plain: zlib reads both) in a temporary directory.
// Must hold: no crash or sanitizer report; a bad pair is a usage_error naming a file; a
// pair that loads holds n 28x28 images and n labels in 0..9 (n cut to the limit asked).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data.hpp"
#include "fuzz_support.hpp"

namespace fz = gradsync::fuzz;
namespace mt = mini_trainer;

namespace {

// One directory per process, removed at exit (a plain array: no destructor runs first).
char dir_name[] = "/tmp/gradsync_fuzz_idx_XXXXXX";
const char* const files[] = {"/fz-images-idx3-ubyte.gz", "/fz-labels-idx1-ubyte.gz"};

const char* dir() {
  static const bool made = [] {
    fz::require(::mkdtemp(dir_name) != nullptr, "a temporary directory");
    std::atexit([] {
      for (const char* f : files) ::unlink((std::string(dir_name) + f).c_str());
      ::rmdir(dir_name);
    });
    return true;
  }();
  return made ? dir_name : nullptr;
}

void write(const std::string& path, const std::uint8_t* p, std::size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  fz::require(f != nullptr, "the temporary file opens");
  fz::require(std::fwrite(p, 1, n, f) == n && std::fclose(f) == 0, "the temporary file is written");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Layout: limit (1 byte: 0 = all), the image file's length (4 bytes, little-endian),
  // the image file, the label file (the rest).
  fz::byte_source in(data, size);
  const std::size_t limit = in.take<std::uint8_t>();
  const std::size_t ilen = std::min<std::size_t>(in.take<std::uint32_t>(), in.left());
  const std::uint8_t* images = data + (size - in.left());
  write(std::string(dir()) + files[0], images, ilen);
  write(std::string(dir()) + files[1], images + ilen, in.left() - ilen);
  mt::dataset d;
  try {
    d = mt::load_split(dir(), "fz", limit);
  } catch (const mt::usage_error& e) {
    fz::require(std::string(e.what()).find(std::string(dir()) + "/fz-") != std::string::npos,
                "the error names the file");
    return 0;
  }
  fz::require(d.n > 0 && (limit == 0 || d.n <= limit), "n samples, at most the limit");
  fz::require(d.pixels == 784 && d.images.size() == d.n * 784, "n images of 28 x 28");
  fz::require(d.labels.size() == d.n, "a label per image");
  for (const std::uint8_t l : d.labels) fz::require(l <= 9, "labels are 0..9");
  return 0;
}
