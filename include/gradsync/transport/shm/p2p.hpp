// SPDX-License-Identifier: Apache-2.0
// Point-to-point messages of transport::shm: one single-producer single-consumer byte
// ring per ordered pair of ranks in the segment. A message is a 16-byte header (tag,
// size) and its payload padded to 16 bytes, streamed through the ring as space allows,
// so messages of any size pass through a fixed ring. Receives from one peer match its
// messages in order by tag (as MPI does for one tag); a message whose tag nobody has
// posted waits at the head of the ring. Progress happens in isend/irecv and wait.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "gradsync/transport/shm/segment.hpp"
#include "gradsync/transport/shm/wait.hpp"

namespace gradsync::transport::detail {

/// One posted send or receive.
struct p2p_op {
  bool is_send = false;
  std::size_t peer = 0;
  std::uint32_t tag = 0;
  std::byte* buf = nullptr;
  std::size_t bytes = 0;
  std::size_t moved = 0;  // stream bytes (payload + padding) moved so far
  bool started = false;   // header written (send) or matched to a message (receive)
  bool done = false;
  std::size_t msg_bytes = 0;  // receive: the size the sender announced
};

struct msg_header {
  static constexpr std::uint32_t magic_value = 0x6d736721;
  std::uint32_t tag;
  std::uint32_t magic;
  std::uint64_t bytes;
};
static_assert(sizeof(msg_header) == 16);

class shm_p2p {
 public:
  shm_p2p(const shm_segment& seg, std::size_t rank)
      : seg_(seg), rank_(rank), cap_(seg.layout().geo.ring_bytes), peers_(seg.layout().geo.ranks) {}

  std::shared_ptr<p2p_op> post(bool is_send, std::size_t peer, std::byte* buf, std::size_t bytes,
                               std::uint32_t tag) {
    auto op = std::make_shared<p2p_op>();
    op->is_send = is_send;
    op->peer = peer;
    op->tag = tag;
    op->buf = buf;
    op->bytes = bytes;
    auto& q = is_send ? peers_[peer].sends : peers_[peer].recvs;
    q.push_back(op);
    ++pending_;
    if (is_send) {
      send_progress(peer);
    } else {
      recv_progress(peer);
    }
    return op;
  }

  /// Moves whatever can move on every pair with pending work; true if anything moved.
  bool progress() {
    if (pending_ == 0) return false;
    bool moved = false;
    for (std::size_t p = 0; p < peers_.size(); ++p) {
      if (!peers_[p].sends.empty()) moved |= send_progress(p);
      if (!peers_[p].recvs.empty()) moved |= recv_progress(p);
    }
    return moved;
  }

  /// Withdraws an unfinished op. Returns false when part of it already went through
  /// the ring: the stream to or from that peer is then out of step for good.
  bool cancel(const std::shared_ptr<p2p_op>& op) {
    if (op->done) return true;
    auto& pq = peers_[op->peer];
    auto& q = op->is_send ? pq.sends : pq.recvs;
    auto it = std::find(q.begin(), q.end(), op);
    if (it != q.end()) {
      q.erase(it);
      --pending_;
    }
    if (pq.current == op.get()) pq.current = nullptr;
    op->done = true;
    return !op->started;
  }

 private:
  struct peer_queues {
    std::deque<std::shared_ptr<p2p_op>> sends, recvs;
    std::uint64_t tail = 0;     // our produced count on the ring to this peer
    std::uint64_t head = 0;     // our consumed count on the ring from this peer
    p2p_op* current = nullptr;  // receive being filled from the ring
  };

  static std::size_t padded(std::size_t b) { return round_up(b, sizeof(msg_header)); }

  bool send_progress(std::size_t peer) {
    auto& pq = peers_[peer];
    ring_ctl& rc = seg_.ring(rank_, peer);
    std::byte* data = seg_.ring_data(rank_, peer);
    auto tail_w = shared_word(rc.tail);
    std::uint64_t head = shared_word(rc.head).load(std::memory_order_acquire);
    bool moved = false;
    while (!pq.sends.empty()) {
      p2p_op& op = *pq.sends.front();
      std::size_t free = cap_ - static_cast<std::size_t>(pq.tail - head);
      if (!op.started) {
        if (free < sizeof(msg_header)) break;
        const msg_header h{op.tag, msg_header::magic_value, op.bytes};
        std::memcpy(data + pq.tail % cap_, &h, sizeof h);
        pq.tail += sizeof h;
        free -= sizeof h;
        op.started = true;
        moved = true;
      }
      const std::size_t total = padded(op.bytes);
      while (op.moved < total && free > 0) {
        const std::size_t pos = pq.tail % cap_;
        const std::size_t n = std::min({free, total - op.moved, cap_ - pos});
        if (op.moved < op.bytes) {
          std::memcpy(data + pos, op.buf + op.moved, std::min(n, op.bytes - op.moved));
        }
        op.moved += n;
        pq.tail += n;
        free -= n;
        tail_w.store(pq.tail, std::memory_order_release);  // let the receiver start early
        moved = true;
      }
      tail_w.store(pq.tail, std::memory_order_release);
      if (op.moved < total) break;
      op.done = true;
      pq.sends.pop_front();
      --pending_;
    }
    if (moved) wake_rank(seg_.ctl(peer));
    return moved;
  }

  bool recv_progress(std::size_t peer) {
    auto& pq = peers_[peer];
    ring_ctl& rc = seg_.ring(peer, rank_);
    const std::byte* data = seg_.ring_data(peer, rank_);
    auto head_w = shared_word(rc.head);
    const std::uint64_t tail = shared_word(rc.tail).load(std::memory_order_acquire);
    bool moved = false;
    for (;;) {
      std::size_t avail = static_cast<std::size_t>(tail - pq.head);
      if (!pq.current) {
        if (avail < sizeof(msg_header)) break;
        msg_header h;
        std::memcpy(&h, data + pq.head % cap_, sizeof h);
        auto it = std::find_if(pq.recvs.begin(), pq.recvs.end(),
                               [&](const auto& o) { return !o->started && o->tag == h.tag; });
        if (it == pq.recvs.end()) break;  // nobody expects this tag yet
        pq.current = it->get();
        pq.current->started = true;
        pq.current->msg_bytes = h.bytes;
        pq.head += sizeof h;
        avail -= sizeof h;
        moved = true;
      }
      p2p_op& op = *pq.current;
      const std::size_t total = padded(op.msg_bytes);
      const std::size_t keep = std::min(op.bytes, op.msg_bytes);  // a size mismatch is dropped
      while (op.moved < total && avail > 0) {
        const std::size_t pos = pq.head % cap_;
        const std::size_t n = std::min({avail, total - op.moved, cap_ - pos});
        if (op.moved < keep)
          std::memcpy(op.buf + op.moved, data + pos, std::min(n, keep - op.moved));
        op.moved += n;
        pq.head += n;
        avail -= n;
        head_w.store(pq.head, std::memory_order_release);  // free space for the sender early
        moved = true;
      }
      if (op.moved < total) break;
      op.done = true;
      auto it = std::find_if(pq.recvs.begin(), pq.recvs.end(),
                             [&](const auto& o) { return o.get() == &op; });
      pq.recvs.erase(it);
      --pending_;
      pq.current = nullptr;
    }
    if (moved) wake_rank(seg_.ctl(peer));
    return moved;
  }

  const shm_segment& seg_;
  std::size_t rank_;
  std::size_t cap_;
  std::vector<peer_queues> peers_;
  std::size_t pending_ = 0;
};

}  // namespace gradsync::transport::detail
