// SPDX-License-Identifier: Apache-2.0
// The allreducer's staging arenas, reused from call to call: a grouped call packs its
// buckets into one, a codec takes its scratch from them, and each goes back to the pool
// when its batch (or codec run) ends, so a steady training loop stops allocating after
// its first steps. Placed like the registered arena: in the transport's heap when it has
// one with room (detail/arena_placement.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "gradsync/detail/arena_placement.hpp"
#include "gradsync/fusion/arena.hpp"

namespace gradsync::detail {

/// Staging arenas over transport Tr's memory; acquire and release from any thread.
template <class Tr>
class staging_pool {
 public:
  explicit staging_pool(Tr& t) : t_(t) {}
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
    if (a->size() < bytes) place_arena(t_, *a, bytes);
    return a;
  }
  /// Gives `a` back for the next acquire().
  void release(std::shared_ptr<fusion::arena> a) {
    std::lock_guard lk(m_);
    pool_.push_back(std::move(a));
  }

 private:
  Tr& t_;
  std::mutex m_;
  std::vector<std::shared_ptr<fusion::arena>> pool_;
};

}  // namespace gradsync::detail
