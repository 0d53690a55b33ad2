// SPDX-License-Identifier: Apache-2.0
// transport::mpi's huge-page staging pool on its own (no MPI needed): size classes,
// block placement, reuse, the slab limit, abandoned blocks and the disabled pool.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gradsync/transport/mpi/stage.hpp>

namespace gd = gradsync::transport::detail;
using pool = gd::mpi_stage_pool;

TEST_CASE("stage pool: size classes from 16 KiB to 2 MiB, nothing larger") {
  pool p(16 << 20, true);
  struct want {
    std::size_t bytes, cls;
  };
  for (const want w :
       {want{1, 0}, want{16 << 10, 0}, want{(16 << 10) + 1, 1}, want{64 << 10, 2}, want{200000, 4},
        want{(1 << 20) - 1, 6}, want{1 << 20, 6}, want{2 << 20, 7}}) {
    const pool::block b = p.acquire(w.bytes);
    REQUIRE(b.ptr != nullptr);
    CHECK(b.cls == w.cls);
    // A block starts on a multiple of its own size (so a slab-aligned 2 MiB block is one
    // whole huge page) and all of it is writable.
    CHECK(reinterpret_cast<std::uintptr_t>(b.ptr) % (pool::min_block << b.cls) == 0);
    std::memset(b.ptr, 0x5a, pool::min_block << b.cls);
    p.release(b);
  }
  CHECK(p.in_use() == 0);
  CHECK(p.acquire((2 << 20) + 1).ptr == nullptr);
  CHECK(p.acquire(0).ptr == nullptr);
}

TEST_CASE("stage pool: blocks of one slab are disjoint and come back for reuse") {
  pool p(2 << 20, true);  // one slab
  std::vector<pool::block> got;
  for (int i = 0; i < 4; ++i) got.push_back(p.acquire(512 << 10));
  for (const auto& b : got) REQUIRE(b.ptr != nullptr);
  CHECK(p.slabs() == 1);
  CHECK(p.in_use() == 4);
  std::vector<std::byte*> starts;
  for (const auto& b : got) starts.push_back(b.ptr);
  std::sort(starts.begin(), starts.end());
  for (std::size_t i = 1; i < starts.size(); ++i) CHECK(starts[i] - starts[i - 1] == (512 << 10));
  // The slab is full and the limit reached: no fifth block, of this class or another.
  CHECK(p.acquire(512 << 10).ptr == nullptr);
  CHECK(p.acquire(16 << 10).ptr == nullptr);
  p.release(got[2]);
  const pool::block again = p.acquire(300 << 10);
  CHECK(again.ptr == got[2].ptr);
  CHECK(p.slabs() == 1);
}

TEST_CASE("stage pool: an abandoned block is never handed out again") {
  pool p(2 << 20, true);
  const pool::block b = p.acquire(2 << 20);
  REQUIRE(b.ptr != nullptr);
  p.abandon(b);
  CHECK(p.in_use() == 0);
  CHECK(p.abandoned() == 1);
  CHECK(p.acquire(2 << 20).ptr == nullptr);  // the only slab's only block is gone
  pool q(4 << 20, true);
  const pool::block c = q.acquire(1 << 20);
  q.abandon(c);
  const pool::block d = q.acquire(1 << 20);  // the slab's other block
  const pool::block e = q.acquire(1 << 20);  // a second slab
  REQUIRE((d.ptr && e.ptr));
  CHECK(d.ptr != c.ptr);
  CHECK(e.ptr != c.ptr);
  CHECK(q.slabs() == 2);
}

TEST_CASE("stage pool: disabled or without a limit it hands out nothing") {
  pool off(64 << 20, false);
  CHECK_FALSE(off.enabled());
  CHECK(off.acquire(1 << 20).ptr == nullptr);
  pool tiny((2 << 20) - 1, true);  // less than one slab
  CHECK_FALSE(tiny.enabled());
  CHECK(tiny.acquire(16 << 10).ptr == nullptr);
  CHECK(off.slabs() == 0);
  CHECK(tiny.slabs() == 0);
}

TEST_CASE("stage pool: a slab with an abandoned block stays mapped after the pool is gone") {
  std::byte* kept = nullptr;
  std::byte* freed = nullptr;
  {
    pool p(4 << 20, true);
    const pool::block a = p.acquire(2 << 20);  // a slab of its own
    const pool::block b = p.acquire(2 << 20);  // another
    REQUIRE((a.ptr && b.ptr));
    std::memset(a.ptr, 0x5a, pool::page);
    p.abandon(a);  // a send freed unfinished: MPI may still read it after the pool is gone
    p.release(b);
    kept = a.ptr;
    freed = b.ptr;
  }
  // msync answers ENOMEM for a range that is not mapped (and reading it would crash).
  REQUIRE(::msync(kept, pool::page, MS_ASYNC) == 0);
  CHECK(std::all_of(kept, kept + pool::page, [](std::byte x) { return x == std::byte{0x5a}; }));
  CHECK(::msync(freed, pool::page, MS_ASYNC) != 0);  // a slab without one is unmapped
}
