// SPDX-License-Identifier: Apache-2.0
// transport::mpi's part of the stall inspector (core/stall.hpp). MPI ranks share no
// memory, so a rank whose call has stalled asks every peer where it is: an 8-byte query
// on a tag above every data and check tag, which each rank answers from inside its own
// waits on this transport (between MPI_Test polls, at most every millisecond) with how
// many calls it has entered. After every peer answered, or 200 ms, the warning names the
// ranks that have not entered the call — those that did not answer are not waiting in
// gradsync at all. Nothing is sent until a call has stalled; a communicator whose tag
// bound is too small for the two tags keeps the inspector silent.
//
// The same board carries failure notices: a rank that failed on another level of a
// two_level (a lost peer inside its node) tells its peers here, on a third tag, and
// their waits end at once with errc::peer_lost quoting the cause (announce / noticed).
// While such a rank waits on its other level, that level's waits serve this board
// (serve): its answers then say whom it waits for there.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gradsync/core/stall.hpp"

namespace gradsync::transport::detail {

class mpi_stall {
  using clock = std::chrono::steady_clock;

 public:
  static constexpr int query_tag = 0x10000;  // above data (< 0x4000) and check (< 0x8000) tags
  static constexpr int reply_tag = 0x10001;
  static constexpr int notice_tag = 0x10002;  // a failure a peer announces
  static constexpr std::size_t no_notice = ~std::size_t{0};

  mpi_stall() = default;
  /// A board whose watch has threshold `warn` (no environment: cannot throw).
  explicit mpi_stall(seconds_d warn) noexcept : watch_(warn) {}

  /// Sizes the board for a communicator of `size` ranks (and checks MPI's tag bound).
  void setup(std::size_t size) {
    // MPI_TAG_UB is cached on MPI_COMM_WORLD only; MPI_Comm_split does not copy it.
    void* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    usable_ = flag && ub && *static_cast<int*>(ub) >= notice_tag;
    query_req_.assign(size, MPI_REQUEST_NULL);
    reply_req_.assign(size, MPI_REQUEST_NULL);
    query_buf_.assign(size, 0);
    reply_buf_.assign(3 * size, 0);
    answer_.assign(size, ~std::uint64_t{0});
    blocked_.assign(size, 0);
    notice_req_.assign(size, MPI_REQUEST_NULL);
  }
  /// Frees what is still in flight and takes in the queries and answers that arrived
  /// (before the communicator is freed, so that MPI has none left unmatched).
  void release(MPI_Comm comm) noexcept {
    if (!usable_) return;
    for (const int tag : {query_tag, reply_tag, notice_tag}) {
      for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &flag, &st) != MPI_SUCCESS || !flag) break;
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        std::vector<char> sink(static_cast<std::size_t>(n > 0 ? n : 1));
        MPI_Recv(sink.data(), n, MPI_BYTE, st.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE);
      }
    }
    for (auto* v : {&query_req_, &reply_req_, &notice_req_}) {
      for (MPI_Request& r : *v) {
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
      }
    }
  }

  stall_watch& watch() { return watch_; }
  /// True once this board has sent or received anything: a peer may then still have a
  /// query, answer or notice on its way here (the transport keeps its communicator).
  bool had_traffic() const { return traffic_; }

  /// At a timeout: asks every peer once more and waits up to `window` for the answers
  /// (answering peers' queries meanwhile, so that ranks timing out together hear each
  /// other). Returns ", no answer from <ranks> (...)" naming the silent ones — they are
  /// not waiting in gradsync: their process died, is stopped, or is busy elsewhere — and
  /// the peers that wait on another level of a two_level, or "" when neither.
  /// A peer waiting inside its node for a lost rank times out about when this rank does
  /// and relays the cause after its own `window` of asking there: when one answers so,
  /// its notice is awaited until 1.8 `window` after the query (within deadline + 1 s at
  /// 500 ms; take it with notice_from(): the caller should prefer it).
  template <class Describe>
  std::string silent_peers(MPI_Comm comm, std::size_t rank, std::chrono::milliseconds window,
                           Describe&& describe) {
    if (!usable_ || answer_.size() < 2) return {};
    ask(comm, rank, clock::now());
    while (answered_ + 1 < answer_.size() && clock::now() - asked_at_ < window) {
      answer(comm);
      collect(comm);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    asking_ = false;
    std::string silent, held;
    for (std::size_t q = 0; q < answer_.size(); ++q) {
      if (q == rank) continue;
      if (answer_[q] == ~std::uint64_t{0}) {
        silent += (silent.empty() ? "" : ", ") + describe(q);
      } else if (blocked_[q] != 0) {
        held += (held.empty() ? "" : ", ") + describe(q) + " for job rank " +
                std::to_string(blocked_[q] - 1);
      }
    }
    if (!held.empty()) {
      const auto until = asked_at_ + window * 9 / 5;
      while (!take_notice(comm) && clock::now() < until) {
        answer(comm);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      held = "; waiting inside their node: " + held;
    }
    if (silent.empty()) return held;
    return "; no answer within " + std::to_string(window.count()) + " ms from " + silent +
           " (its process died, is stopped, or is stuck outside gradsync)" + held;
  }

  /// Tells every peer that this rank failed, and why: their waits on this transport end
  /// with errc::peer_lost quoting `cause`. Once per transport; nonblocking.
  void announce(MPI_Comm comm, std::size_t rank, const char* cause) noexcept {
    if (!usable_ || announced_ || comm == MPI_COMM_NULL) return;
    announced_ = true;
    traffic_ = true;
    try {
      notice_out_.assign(cause, cause + ::strnlen(cause, 2048));
    } catch (...) {
      return;
    }
    for (std::size_t q = 0; q < notice_req_.size(); ++q) {
      if (q == rank) continue;
      MPI_Isend(notice_out_.data(), static_cast<int>(notice_out_.size()), MPI_BYTE,
                static_cast<int>(q), notice_tag, comm, &notice_req_[q]);
    }
  }
  /// The peer whose failure notice arrived (no_notice: none), and its cause.
  std::size_t notice_from() const { return notice_from_; }
  std::string notice() const { return std::string(notice_in_.begin(), notice_in_.end()); }

  /// Runs between polls of a wait of this transport: answers peers' queries and, when
  /// this rank's call has stalled, asks and then warns. `describe(q)` names rank q.
  /// Returns true when a peer's failure notice has arrived (the wait should end).
  template <class Describe>
  bool poll(clock::time_point now, MPI_Comm comm, std::size_t rank, std::size_t log_rank,
            Describe&& describe) {
    if (!usable_ || now < next_look_) return notice_from_ != no_notice;
    next_look_ = now + std::chrono::milliseconds(1);
    if (take_notice(comm)) return true;
    answer(comm);
    if (asking_ && asked_in_ != watch_.entered()) {
      asking_ = false;  // asked in an earlier call, which has ended: the answers are stale
    }
    if (asking_) {
      collect(comm);
      if (answered_ + 1 >= answer_.size() || now - asked_at_ > std::chrono::milliseconds(200)) {
        std::vector<peer_position> where;
        for (std::size_t q = 0; q < answer_.size(); ++q) {
          if (q == rank) continue;
          const bool known = answer_[q] != ~std::uint64_t{0};
          where.push_back({q, describe(q), known, known ? answer_[q] : 0, blocked_[q]});
        }
        watch_.warn(log_rank, describe(rank), where);
        asking_ = false;
      }
    } else if (watch_.due(now)) {
      ask(comm, rank, now);
    }
    return false;
  }

  /// From a wait on another level of a two_level (this rank is in the call, waiting for
  /// job rank blocked_on - 1 there): answers peers' queries, saying so, at most every ms.
  /// Returns true when a peer's failure notice has arrived.
  bool serve(clock::time_point now, MPI_Comm comm, std::uint64_t blocked_on) {
    if (!usable_ || now < next_look_) return notice_from_ != no_notice;
    next_look_ = now + std::chrono::milliseconds(1);
    if (take_notice(comm)) return true;
    blocked_on_ = blocked_on;
    answer(comm);
    blocked_on_ = 0;
    return false;
  }

  /// True when a peer's failure notice has arrived (received now if it is waiting).
  bool take_notice(MPI_Comm comm) {
    if (notice_from_ != no_notice) return true;
    if (!usable_) return false;
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, notice_tag, comm, &flag, &st) != MPI_SUCCESS || !flag)
      return false;
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    notice_in_.assign(static_cast<std::size_t>(n > 0 ? n : 0), '\0');
    MPI_Recv(notice_in_.data(), n, MPI_BYTE, st.MPI_SOURCE, notice_tag, comm, MPI_STATUS_IGNORE);
    notice_from_ = static_cast<std::size_t>(st.MPI_SOURCE);
    traffic_ = true;
    return true;
  }

 private:
  void answer(MPI_Comm comm) {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, query_tag, comm, &flag, &st) != MPI_SUCCESS || !flag) return;
      traffic_ = true;
      std::uint64_t id = 0;
      MPI_Recv(&id, 1, MPI_UINT64_T, st.MPI_SOURCE, query_tag, comm, MPI_STATUS_IGNORE);
      const auto q = static_cast<std::size_t>(st.MPI_SOURCE);
      if (q >= reply_req_.size() || !idle(reply_req_[q])) continue;  // still answering it
      reply_buf_[3 * q] = id;
      reply_buf_[3 * q + 1] = watch_.entered();
      reply_buf_[3 * q + 2] = blocked_on_;
      MPI_Isend(&reply_buf_[3 * q], 3, MPI_UINT64_T, st.MPI_SOURCE, reply_tag, comm,
                &reply_req_[q]);
    }
  }

  void collect(MPI_Comm comm) {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, reply_tag, comm, &flag, &st) != MPI_SUCCESS || !flag) return;
      traffic_ = true;
      std::uint64_t got[3] = {};
      MPI_Recv(got, 3, MPI_UINT64_T, st.MPI_SOURCE, reply_tag, comm, MPI_STATUS_IGNORE);
      const auto q = static_cast<std::size_t>(st.MPI_SOURCE);
      if (got[0] != query_id_ || q >= answer_.size()) continue;  // an answer to an old query
      if (answer_[q] == ~std::uint64_t{0}) ++answered_;
      answer_[q] = got[1];
      blocked_[q] = got[2];
    }
  }

  void ask(MPI_Comm comm, std::size_t rank, clock::time_point now) {
    ++query_id_;
    answered_ = 0;
    answer_.assign(answer_.size(), ~std::uint64_t{0});
    blocked_.assign(blocked_.size(), 0);
    for (std::size_t q = 0; q < query_req_.size(); ++q) {
      if (q == rank || !idle(query_req_[q])) continue;
      query_buf_[q] = query_id_;
      MPI_Isend(&query_buf_[q], 1, MPI_UINT64_T, static_cast<int>(q), query_tag, comm,
                &query_req_[q]);
    }
    asking_ = true;
    traffic_ = true;
    asked_at_ = now;
    asked_in_ = watch_.entered();
  }

  // True when `r` may be reused (never used, or its send completed).
  static bool idle(MPI_Request& r) {
    if (r == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    return done != 0;
  }

  stall_watch watch_;
  bool usable_ = false, asking_ = false, announced_ = false, traffic_ = false;
  std::size_t notice_from_ = no_notice;
  std::vector<char> notice_out_, notice_in_;  // heap buffers: a pending send survives a move
  std::vector<MPI_Request> notice_req_;
  std::uint64_t query_id_ = 0;
  std::size_t answered_ = 0;
  clock::time_point next_look_{}, asked_at_{};
  std::vector<MPI_Request> query_req_, reply_req_;
  std::vector<std::uint64_t> query_buf_, reply_buf_, answer_;  // answer_: per rank, or ~0
  std::vector<std::uint64_t> blocked_;  // per rank: whom it waits for elsewhere, + 1
  std::uint64_t blocked_on_ = 0;        // what this rank's answers say of it (serve)
  std::uint64_t asked_in_ = 0;          // the call (entered count) a query was asked in
};

}  // namespace gradsync::transport::detail
