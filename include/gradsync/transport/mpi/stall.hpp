// SPDX-License-Identifier: Apache-2.0
// transport::mpi's part of the stall inspector (core/stall.hpp). MPI ranks share no
// memory, so a rank whose call has stalled asks every peer where it is: an 8-byte query
// on a tag above every data and check tag, which each rank answers from inside its own
// waits on this transport (between MPI_Test polls, at most every millisecond) with how
// many calls it has entered. After every peer answered, or 200 ms, the warning names the
// ranks that have not entered the call — those that did not answer are not waiting in
// gradsync at all. Nothing is sent until a call has stalled; a communicator whose tag
// bound is too small for the two tags keeps the inspector silent.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gradsync/core/stall.hpp"

namespace gradsync::transport::detail {

class mpi_stall {
  using clock = std::chrono::steady_clock;

 public:
  static constexpr int query_tag = 0x10000;  // above data (< 0x4000) and check (< 0x8000) tags
  static constexpr int reply_tag = 0x10001;

  mpi_stall() = default;
  /// A board whose watch has threshold `warn` (no environment: cannot throw).
  explicit mpi_stall(seconds_d warn) noexcept : watch_(warn) {}

  /// Sizes the board for `comm` (its size and tag bound).
  void setup(MPI_Comm comm, std::size_t size) {
    void* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag);
    usable_ = flag && ub && *static_cast<int*>(ub) >= reply_tag;
    query_req_.assign(size, MPI_REQUEST_NULL);
    reply_req_.assign(size, MPI_REQUEST_NULL);
    query_buf_.assign(size, 0);
    reply_buf_.assign(2 * size, 0);
    answer_.assign(size, ~std::uint64_t{0});
  }
  /// Frees what is still in flight and takes in the queries and answers that arrived
  /// (before the communicator is freed, so that MPI has none left unmatched).
  void release(MPI_Comm comm) noexcept {
    if (!usable_) return;
    for (const int tag : {query_tag, reply_tag}) {
      for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &flag, &st) != MPI_SUCCESS || !flag) break;
        std::uint64_t sink[2];
        MPI_Recv(sink, 2, MPI_UINT64_T, st.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE);
      }
    }
    for (auto* v : {&query_req_, &reply_req_}) {
      for (MPI_Request& r : *v) {
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
      }
    }
  }

  stall_watch& watch() { return watch_; }

  /// Runs between polls of a wait of this transport: answers peers' queries and, when
  /// this rank's call has stalled, asks and then warns. `describe(q)` names rank q.
  template <class Describe>
  void poll(clock::time_point now, MPI_Comm comm, std::size_t rank, std::size_t log_rank,
            Describe&& describe) {
    if (!usable_ || now < next_look_) return;
    next_look_ = now + std::chrono::milliseconds(1);
    answer(comm);
    if (asking_) {
      collect(comm);
      if (answered_ + 1 >= answer_.size() || now - asked_at_ > std::chrono::milliseconds(200)) {
        std::vector<peer_position> where;
        for (std::size_t q = 0; q < answer_.size(); ++q) {
          if (q == rank) continue;
          const bool known = answer_[q] != ~std::uint64_t{0};
          where.push_back({q, describe(q), known, known ? answer_[q] : 0});
        }
        watch_.warn(log_rank, describe(rank), where);
        asking_ = false;
      }
    } else if (watch_.due(now)) {
      ask(comm, rank, now);
    }
  }

 private:
  void answer(MPI_Comm comm) {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, query_tag, comm, &flag, &st) != MPI_SUCCESS || !flag) return;
      std::uint64_t id = 0;
      MPI_Recv(&id, 1, MPI_UINT64_T, st.MPI_SOURCE, query_tag, comm, MPI_STATUS_IGNORE);
      const auto q = static_cast<std::size_t>(st.MPI_SOURCE);
      if (q >= reply_req_.size() || !idle(reply_req_[q])) continue;  // still answering it
      reply_buf_[2 * q] = id;
      reply_buf_[2 * q + 1] = watch_.entered();
      MPI_Isend(&reply_buf_[2 * q], 2, MPI_UINT64_T, st.MPI_SOURCE, reply_tag, comm,
                &reply_req_[q]);
    }
  }

  void collect(MPI_Comm comm) {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, reply_tag, comm, &flag, &st) != MPI_SUCCESS || !flag) return;
      std::uint64_t got[2] = {};
      MPI_Recv(got, 2, MPI_UINT64_T, st.MPI_SOURCE, reply_tag, comm, MPI_STATUS_IGNORE);
      const auto q = static_cast<std::size_t>(st.MPI_SOURCE);
      if (got[0] != query_id_ || q >= answer_.size()) continue;  // an answer to an old query
      if (answer_[q] == ~std::uint64_t{0}) ++answered_;
      answer_[q] = got[1];
    }
  }

  void ask(MPI_Comm comm, std::size_t rank, clock::time_point now) {
    ++query_id_;
    answered_ = 0;
    answer_.assign(answer_.size(), ~std::uint64_t{0});
    for (std::size_t q = 0; q < query_req_.size(); ++q) {
      if (q == rank || !idle(query_req_[q])) continue;
      query_buf_[q] = query_id_;
      MPI_Isend(&query_buf_[q], 1, MPI_UINT64_T, static_cast<int>(q), query_tag, comm,
                &query_req_[q]);
    }
    asking_ = true;
    asked_at_ = now;
  }

  // True when `r` may be reused (never used, or its send completed).
  static bool idle(MPI_Request& r) {
    if (r == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    return done != 0;
  }

  stall_watch watch_;
  bool usable_ = false, asking_ = false;
  std::uint64_t query_id_ = 0;
  std::size_t answered_ = 0;
  clock::time_point next_look_{}, asked_at_{};
  std::vector<MPI_Request> query_req_, reply_req_;
  std::vector<std::uint64_t> query_buf_, reply_buf_, answer_;  // answer_: per rank, or ~0
};

}  // namespace gradsync::transport::detail
