// SPDX-License-Identifier: Apache-2.0
// transport::local — ranks are threads of one process (tests, demos, single-process
// multi-device). The embedded default transport.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gradsync/core/abort.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/stall.hpp"
#include "gradsync/core/workspace.hpp"
#include "gradsync/kernels/host.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/split.hpp"
#include "gradsync/transport/local/group.hpp"

namespace gradsync::transport {

class local {
 public:
  static constexpr std::string_view name = "local";
  static constexpr memory_space memory = memory_space::host;
  static constexpr bool peer_access = false;
  static constexpr bool native_allreduce = false;
  static constexpr transport_traits traits{.watches_stalls = true, .aborts = true, .splits = true};

  /// A posted send or receive; destroying an unfinished one cancels it safely.
  class request {
   public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        cancel();
        msg_ = std::move(o.msg_);
        group_ = o.group_;
        peer_ = o.peer_;
      }
      return *this;
    }
    ~request() { cancel(); }
    bool active() const { return msg_ != nullptr; }

   private:
    friend class local;
    void cancel() {
      if (msg_) group_->cancel(msg_);
      msg_.reset();
    }
    std::shared_ptr<detail::local_msg> msg_;
    detail::local_group* group_ = nullptr;
    std::size_t peer_ = 0;
  };

  /// Rank `rank` of the in-process group `group` (see run_local for the usual way in).
  local(std::shared_ptr<detail::local_group> group, std::size_t rank)
      : group_(std::move(group)), rank_(rank) {
    if (!group_ || rank_ >= group_->size()) {
      throw error(errc::invalid_argument, {rank, error_site::npos, ~std::uint64_t{0}},
                  "rank out of range for the local group");
    }
  }
  local(const local&) = delete;
  local& operator=(const local&) = delete;
  local(local&&) = default;
  /// A rank of a group made by split() leaves it here (its peers get errc::peer_lost
  /// instead of waiting); the first group's ranks leave when run_local's function ends.
  ~local() {
    if (group_ && group_->is_split()) group_->leave(rank_);
  }

  /// The ranks that pass the same `color` (>= 0) form a new transport::local, ordered by
  /// `key` then by rank here (like MPI_Comm_split; collective over this transport's
  /// ranks, within `d`). Errors on it name the ranks of the first group.
  local split(int color, int key, deadline d = deadline::after(default_timeout())) {
    if (color < 0) {
      throw error(errc::invalid_argument, site(error_site::npos),
                  "split color must be >= 0 (every rank joins exactly one group)");
    }
    using group_ptr = std::shared_ptr<detail::local_group>;
    struct reply {  // the new rank and a heap copy of the group's pointer, for the receiver
      std::uint64_t rank;
      group_ptr* holder;
    };
    const std::uint32_t tag = data_tag(next_seq());
    const detail::split_entry mine{color, key};
    if (rank_ != 0) {  // rank 0 forms the groups
      reply got{};
      auto s = isend(0, &mine, sizeof mine, tag);
      auto q = irecv(0, &got, sizeof got, tag);
      wait(s, d);
      wait(q, d);
      const std::unique_ptr<group_ptr> held(got.holder);
      return local(std::move(*held), static_cast<std::size_t>(got.rank));
    }
    const std::size_t n = size();
    std::vector<detail::split_entry> all(n);
    all[0] = mine;
    std::vector<request> in(n);
    for (std::size_t q = 1; q < n; ++q) in[q] = irecv(q, &all[q], sizeof(detail::split_entry), tag);
    for (std::size_t q = 1; q < n; ++q) wait(in[q], d);
    std::vector<reply> out(n);
    std::vector<bool> placed(n);
    group_ptr self;
    std::size_t self_rank = 0;
    for (std::size_t first = 0; first < n; ++first) {  // one group per colour
      if (placed[first]) continue;
      const std::vector<std::size_t> members = detail::split_members(all, all[first].color);
      auto g = std::make_shared<detail::local_group>(members.size());
      std::vector<std::size_t> origin(members.size());
      for (std::size_t k = 0; k < members.size(); ++k) origin[k] = group_->origin_rank(members[k]);
      g->set_origin(std::move(origin));
      for (std::size_t k = 0; k < members.size(); ++k) {
        placed[members[k]] = true;
        if (members[k] == 0) {
          self = g, self_rank = k;
        } else {
          out[members[k]] = {k, new group_ptr(g)};
        }
      }
    }
    for (std::size_t q = 1; q < n; ++q) in[q] = isend(q, &out[q], sizeof(reply), tag);
    for (std::size_t q = 1; q < n; ++q) wait(in[q], d);
    return local(std::move(self), self_rank);
  }

  std::size_t rank() const { return rank_; }
  std::size_t size() const { return group_->size(); }

  request isend(std::size_t peer, const void* data, std::size_t bytes, std::uint32_t tag) {
    return post(true, peer, const_cast<void*>(data), bytes, tag);
  }
  request irecv(std::size_t peer, void* data, std::size_t bytes, std::uint32_t tag) {
    return post(false, peer, data, bytes, tag);
  }

  void wait(request& r, deadline d) {
    if (abort_.raised()) {
      const bool send = r.msg_ && r.msg_->is_send;
      const std::size_t peer = r.peer_;
      r.cancel();
      abort_switch::throw_aborted(site(peer), send
                                                  ? "before this rank could send to the peer"
                                                  : "before this rank could receive from the peer");
    }
    if (!r.msg_) return;
    const int st = group_->wait(rank_, *r.msg_, r.peer_, d.at, abort_,
                                [this](std::chrono::steady_clock::time_point now) {
                                  if (stall_.due(now)) report_stall();
                                });
    const auto& m = *r.msg_;
    if (st == 0 && m.size_mismatch.load()) {
      // Read before the reset: it may free the message (m with it).
      const std::size_t mine = m.bytes, theirs = m.other_bytes;
      const bool sent = m.is_send;
      r.msg_.reset();
      throw error(errc::mismatch, site(r.peer_),
                  "message size differs: this rank " + std::string(sent ? "sent " : "expected ") +
                      std::to_string(mine) + " bytes, the peer " + (sent ? "expected " : "sent ") +
                      std::to_string(theirs));
    }
    if (st == 0) {
      r.msg_.reset();
      return;
    }
    const std::size_t peer = r.peer_;
    const bool send = m.is_send;
    r.cancel();
    if (st == 3) {
      abort_switch::throw_aborted(site(peer),
                                  send ? "while this rank waited to send to the peer"
                                       : "while this rank waited to receive from the peer");
    }
    if (st == 1) {
      throw error(errc::peer_lost, site(peer),
                  std::string("the peer left the group (its function returned or threw) while "
                              "this rank waited to ") +
                      (send ? "send to it" : "receive from it"));
    }
    throw error(errc::timeout, site(peer),
                std::string("deadline passed while waiting to ") +
                    (send ? "send to the peer" : "receive from the peer") +
                    " (set GRADSYNC_TIMEOUT or call_options::timeout to wait longer)");
  }

  /// Makes this rank's wait in flight and every later one fail with errc::aborted within
  /// ~10 ms (core/abort.hpp). Thread-safe and async-signal-safe.
  void abort() noexcept { abort_.raise(); }

  /// This rank enters call `seq` (the entry points call it; core/stall.hpp).
  void enter_call(std::uint64_t seq, const call_note& note) {
    stall_.enter(seq, note);
    group_->publish_entered(rank_, stall_.entered());
  }

  std::uint64_t next_seq() { return seq_++; }
  std::uint64_t last_seq() const { return seq_ - 1; }
  workspace& scratch() { return scratch_; }
  kernels::host_executor executor() const { return {}; }

 private:
  error_site site(std::size_t peer) const {
    if (!group_->is_split()) return {rank_, peer, seq_ - 1};
    error_site s{group_->origin_rank(rank_), peer < size() ? group_->origin_rank(peer) : peer,
                 seq_ - 1};
    s.group_rank = rank_;
    s.group_peer = peer < size() ? peer : error_site::npos;
    s.group_size = size();
    return s;
  }

  // The stall warning: every other rank's count of entered calls, from the group's board.
  void report_stall() const {
    std::vector<peer_position> where;
    for (std::size_t q = 0; q < size(); ++q) {
      if (q != rank_) where.push_back({q, "rank " + std::to_string(q), true, group_->entered(q)});
    }
    stall_.warn(rank_, "rank " + std::to_string(rank_), where);
  }

  request post(bool is_send, std::size_t peer, void* buf, std::size_t bytes, std::uint32_t tag) {
    if (peer >= size()) {
      throw error(errc::invalid_argument, site(peer), "peer rank out of range");
    }
    auto m = std::make_shared<detail::local_msg>();
    m->src = is_send ? rank_ : peer;
    m->dst = is_send ? peer : rank_;
    m->tag = tag;
    m->is_send = is_send;
    m->bytes = bytes;
    if (is_send) {
      m->sbuf = buf;
    } else {
      m->rbuf = buf;
    }
    request r;
    r.group_ = group_.get();
    r.peer_ = peer;
    r.msg_ = group_->post(std::move(m));
    return r;
  }

  std::shared_ptr<detail::local_group> group_;
  std::size_t rank_;
  std::uint64_t seq_ = 0;
  workspace scratch_;
  abort_switch abort_;
  stall_watch stall_;
};

static_assert(gradsync::transport_policy<local>);

}  // namespace gradsync::transport
