// SPDX-License-Identifier: Apache-2.0
// The allreducer's staging arenas, reused from call to call: a grouped call packs its
// buckets into one, a codec takes its scratch from them, and each goes back to the pool
// when its batch (or codec run) ends, so a steady training loop stops allocating after
// its first steps. Placed like the registered arena: in the transport's heap when it has
// one with room (allreducer/arena_placement.hpp). Not a template: the transport is kept
// behind one function pointer, so every allreducer of a program shares this code.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "gradsync/allreducer/arena_placement.hpp"
#include "gradsync/fusion/arena.hpp"

namespace gradsync::detail {

/// Staging arenas over a transport's memory; acquire and release from any thread.
class staging_pool {
 public:
  /// Places an arena of at least `bytes` over the transport at `transport`.
  using place_fn = void (*)(void* transport, fusion::arena& a, std::size_t bytes);
  /// place_arena over a transport of type Tr.
  template <class Tr>
  static place_fn placer() {
    return [](void* t, fusion::arena& a, std::size_t bytes) {
      place_arena(*static_cast<Tr*>(t), a, bytes);
    };
  }

  /// Arenas placed by `place` over the transport at `t`, which must outlive the pool.
  staging_pool(void* t, place_fn place) : t_(t), place_(place) {}
  staging_pool(const staging_pool&) = delete;
  staging_pool& operator=(const staging_pool&) = delete;

  /// An arena of at least `bytes`: the first pooled one that is large enough, else a
  /// pooled one grown (or a new one when the pool is empty).
  std::shared_ptr<fusion::arena> acquire(std::size_t bytes) {
    std::shared_ptr<fusion::arena> a;
    {
      std::lock_guard lk(m_);
      auto it =
          std::find_if(pool_.begin(), pool_.end(), [&](auto& p) { return p->size() >= bytes; });
      if (it == pool_.end() && !pool_.empty()) it = pool_.begin();
      if (it != pool_.end()) {
        a = std::move(*it);
        pool_.erase(it);
      }
    }
    if (!a) a = std::make_shared<fusion::arena>();
    if (a->size() < bytes) place_(t_, *a, bytes);
    return a;
  }
  /// Gives `a` back for the next acquire().
  void release(std::shared_ptr<fusion::arena> a) {
    std::lock_guard lk(m_);
    pool_.push_back(std::move(a));
  }

 private:
  void* t_;         // the transport
  place_fn place_;  // place_arena over it
  std::mutex m_;
  std::vector<std::shared_ptr<fusion::arena>> pool_;
};

}  // namespace gradsync::detail
