// SPDX-License-Identifier: Apache-2.0
// What the harnesses share: the fuzz input read front to back, a check that aborts (so
// libFuzzer keeps the input) when a documented property fails, and two stand-ins for the
// other ranks whose every received byte is fuzz input: a compress::channel for the
// codecs and a transport for the checks that exchange records (plan, non-finite, header).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <gradsync/compress/concept.hpp>
#include <gradsync/core/deadline.hpp>
#include <gradsync/core/error.hpp>
#include <gradsync/core/workspace.hpp>
#include <gradsync/kernels/host.hpp>
#include <gradsync/transport/concept.hpp>

namespace gradsync::fuzz {

/// Aborts with `what` when `ok` is false: a crash is what makes libFuzzer save the input.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz property failed: %s\n", what);
  std::abort();
}

/// The fuzz input, consumed front to back. Past its end, reads give zeros.
class byte_source {
 public:
  byte_source(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::size_t left() const { return size_ - at_; }

  /// Copies up to `n` bytes into `dst`; returns how many there were (the rest of dst is
  /// left as it was).
  std::size_t fill(void* dst, std::size_t n) {
    const std::size_t got = std::min(n, left());
    if (got) std::memcpy(dst, data_ + at_, got);
    at_ += got;
    return got;
  }

  template <class T>
  T take() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v{};
    fill(&v, sizeof v);
    return v;
  }

  /// A value in [lo, hi] from one byte (two when the range needs them).
  std::size_t in_range(std::size_t lo, std::size_t hi) {
    const std::size_t span = hi - lo + 1;
    const std::size_t raw = span <= 256 ? take<std::uint8_t>() : take<std::uint16_t>();
    return lo + raw % span;
  }

  /// Bytes up to the next NUL (consumed) or the end, at most `max` of them kept.
  std::string str(std::size_t max = 4096) {
    std::string s;
    while (at_ < size_) {
      const char c = static_cast<char>(data_[at_++]);
      if (c == '\0') break;
      if (s.size() < max) s.push_back(c);
    }
    return s;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

/// This rank's own gradient: not input from elsewhere, so made from a seed the input
/// picks (finite values in [-64, 64)), with up to three NaN or Inf placed where it says.
/// Returns false when it placed one.
template <class T>
bool make_gradient(std::span<T> x, byte_source& in) {
  std::uint64_t z = in.take<std::uint32_t>() | 1;
  for (T& v : x) {
    z ^= z << 13, z ^= z >> 7, z ^= z << 17;  // xorshift64
    v = static_cast<T>(static_cast<double>(z >> 11) * 0x1.0p-53 * 128.0 - 64.0);
  }
  const std::size_t bad = in.in_range(0, 15);
  for (std::size_t i = 0; i < bad % 4 && !x.empty(); ++i) {
    const std::size_t at = in.take<std::uint16_t>() % x.size();
    x[at] = (bad & 4)   ? static_cast<T>(NAN)
            : (bad & 8) ? static_cast<T>(-INFINITY)
                        : static_cast<T>(INFINITY);
  }
  return bad % 4 == 0 || x.empty();
}

/// True when every element of v is finite.
template <class T>
bool all_finite(std::span<const T> v) {
  return std::all_of(v.begin(), v.end(), [](T e) { return e - e == 0; });
}

/// True when a and b hold the same bits, or are both NaN (a NaN's payload may differ with
/// the order of an addition's operands, which no contract fixes).
template <class T>
bool same_value(T a, T b) {
  return (a != a && b != b) || std::memcmp(&a, &b, sizeof a) == 0;
}

/// A compress::channel for rank `me` of `n` in which every other rank is the fuzz input:
/// an allreduce's result and the peers' blocks of an allgather are its next bytes (an
/// allreduce the input runs out in keeps this rank's own values for the rest, as a group
/// of one would). Keeps a copy of what each exchange returned, for the harness to check.
struct fuzz_channel {
  byte_source* in = nullptr;
  std::size_t me = 0, n = 2;
  std::vector<compress::tensor_part> parts;
  std::deque<std::vector<std::byte>> held;      // scratch, valid until run() returns
  std::vector<std::vector<std::byte>> results;  // what each exchange returned, in order

  std::size_t ranks() const { return n; }
  std::size_t rank() const { return me; }
  template <class W, class WOp>
  void allreduce(std::span<W> v, WOp) {
    in->fill(v.data(), v.size_bytes());
    const auto* b = reinterpret_cast<const std::byte*>(v.data());
    results.emplace_back(b, b + v.size_bytes());
  }
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) {
    require(all.size() == n * mine.size(), "allgather's output holds one block per rank");
    for (std::size_t r = 0; r < n; ++r) {
      const std::span<std::byte> block = all.subspan(r * mine.size(), mine.size());
      if (r == me) {
        std::copy(mine.begin(), mine.end(), block.begin());
      } else {
        std::fill(block.begin(), block.end(), std::byte{0});
        in->fill(block.data(), block.size());
      }
    }
    results.emplace_back(all.begin(), all.end());
  }
  std::span<std::byte> scratch(std::size_t bytes) {
    held.emplace_back(bytes);
    return held.back();
  }
  template <class F>
  void timed(std::string_view, F&& f) {
    f();
  }
  std::span<const compress::tensor_part> tensors() const { return parts; }
  bool overlaps_wire() const { return false; }  // results come back in call order
};
static_assert(compress::channel<fuzz_channel>);

/// Rank `rank` of a transport of `size` ranks whose peers are the fuzz input: a send
/// goes nowhere, a receive is filled with the input's next bytes, and one the input
/// cannot fill completes as a timeout (a peer that never sent). What it received is kept.
class fuzz_transport {
 public:
  static constexpr std::string_view name = "fuzz";
  static constexpr memory_space memory = memory_space::host;
  static constexpr bool peer_access = false;
  static constexpr bool native_allreduce = false;
  static constexpr transport_traits traits{};

  struct request {
    std::size_t peer = 0;
    bool starved = false;  // the input ended before the message did
  };

  fuzz_transport(byte_source& in, std::size_t rank, std::size_t size)
      : in_(&in), rank_(rank), size_(size) {}

  std::size_t rank() const { return rank_; }
  std::size_t size() const { return size_; }
  request isend(std::size_t peer, const void*, std::size_t, std::uint32_t) {
    require(peer < size_ && peer != rank_, "a send goes to another rank of the group");
    return {peer, false};
  }
  request irecv(std::size_t peer, void* p, std::size_t bytes, std::uint32_t) {
    require(peer < size_ && peer != rank_, "a receive comes from another rank of the group");
    const std::size_t got = in_->fill(p, bytes);
    const auto* b = static_cast<const std::byte*>(p);
    received.insert(received.end(), b, b + got);
    return {peer, got < bytes};
  }
  void wait(request& r, deadline) {
    if (r.starved) {
      throw error(errc::timeout, {rank_, r.peer}, "the fuzz input ended before the message");
    }
  }
  std::uint64_t next_seq() { return seq_++; }
  workspace& scratch() { return scratch_; }
  kernels::host_executor executor() const { return {}; }

  std::vector<std::byte> received;

 private:
  byte_source* in_;
  std::size_t rank_, size_;
  std::uint64_t seq_ = 0;
  workspace scratch_;
};
static_assert(transport_policy<fuzz_transport>);

}  // namespace gradsync::fuzz
