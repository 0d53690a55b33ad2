// SPDX-License-Identifier: Apache-2.0
// The functions shm.hpp declares: inline in a header-only build, compiled once by
// <gradsync/src.hpp> under GRADSYNC_SEPARATE_COMPILATION (config.hpp).
#pragma once

#include "gradsync/transport/shm.hpp"

namespace gradsync::transport {

GRADSYNC_DECL void shm::wait(request& r, deadline d) {
  if (!r.op_) return;
  auto& st = *st_;
  if (st.abort_.raised()) {
    r.cancel();
    st.check_usable();  // throws errc::aborted, marking this rank failed
  }
  detail::p2p_op& op = *r.op_;
  auto ready = [&] {
    st.p2p_.progress();
    return op.done;
  };
  if (!ready()) {
    const char* what = op.is_send ? "to send to the peer" : "to receive from the peer";
    try {
      detail::learning_wait(
          st.seg_.ctl(st.rank_), st.spin_, d.at, ready,
          [&](clock::time_point now) { return st.idle_check(op.peer, now, d.at, what, ready); });
    } catch (...) {
      r.cancel();
      throw;
    }
  }
  const std::size_t peer = op.peer, sent = op.msg_bytes, want = op.bytes;
  const bool recv_mismatch = !op.is_send && sent != want;
  r.op_.reset();
  if (recv_mismatch) {
    throw error(errc::mismatch, st.site(peer),
                "message size differs: this rank expected " + std::to_string(want) +
                    " bytes, the peer sent " + std::to_string(sent));
  }
}

GRADSYNC_DECL shm shm::split(int color, int key, deadline d) {
  if (color < 0) {
    throw error(errc::invalid_argument, st_->site(error_site::npos),
                "split color must be >= 0 (every rank joins exactly one group)");
  }
  const std::uint64_t seq = next_seq();
  std::vector<detail::split_entry> all;  // all[q]: rank q's colour and key
  gradsync::detail::allgather_pod(*this, detail::split_entry{color, key}, all, data_tag(seq), d);
  const std::size_t r = rank();
  const std::vector<std::size_t> members = detail::split_members(all, color);
  shm_options o = st_->opts_;
  o.size = members.size();
  o.rank = static_cast<std::size_t>(std::find(members.begin(), members.end(), r) - members.begin());
  // Unique per split call of this job: every rank of the group is at the same seq.
  o.job += ".split" + std::to_string(seq) + "." + std::to_string(color);
  o.job_ranks.resize(members.size());
  for (std::size_t k = 0; k < members.size(); ++k) o.job_ranks[k] = st_->job_rank(members[k]);
  o.bootstrap_timeout = seconds_d(std::max(0.0, d.seconds_left()));
  return shm(o);
}

GRADSYNC_DECL void shm::wait_flags(unsigned k, std::uint64_t v, deadline d) {
  auto& st = *st_;
  std::size_t missing = 0;
  auto ready = [&] {
    for (; missing < st.size_; ++missing) {
      if (detail::shared_word(flag_word(missing, k)).load(std::memory_order_acquire) < v)
        return false;
    }
    return true;
  };
  if (st.abort_.raised()) st.check_usable();  // aborted: fails even when the flags are set
  if (ready()) return;
  st.check_usable();
  const std::string what = describe_flag(k, v);
  // Only the steps inside a call teach the spin policy: the header round and the done
  // flag wait for peers to arrive, which says nothing about spinning (docs/collectives.md).
  detail::learning_wait(
      st.seg_.ctl(st.rank_), st.spin_, d.at, ready,
      [&](clock::time_point now) { return st.idle_check(missing, now, d.at, what.c_str(), ready); },
      k == flag_stage);
}

GRADSYNC_DECL std::string shm::describe_flag(unsigned k, std::uint64_t v) {
  if (k == flag_stage) {
    // The flag keeps the op's number modulo 2^32 (algo/detail/direct_call.hpp).
    return "for the peer to reach step " + std::to_string(v & 0xffffffffu) + " of op #" +
           std::to_string(((v >> 32) - 1) & 0xffffffffu) +
           " modulo 2^32 (direct algorithm stage flag)";
  }
  if (k == flag_done) return "for the peer to finish op #" + std::to_string(v - 1);
  return "for the peer to post its header for op #" + std::to_string(v - 1) + " (slot " +
         std::to_string(k) + ")";
}

GRADSYNC_DECL shm::request shm::post(bool is_send, std::size_t peer, void* buf, std::size_t bytes,
                                     std::uint32_t tag) {
  auto& st = *st_;
  st.check_usable();
  if (peer >= st.size_ || peer == st.rank_) {
    throw error(errc::invalid_argument, st.site(peer),
                "peer rank out of range (or this rank itself) for an shm message");
  }
  request r;
  r.st_ = st_.get();
  r.op_ = st.p2p_.post(is_send, peer, static_cast<std::byte*>(buf), bytes, tag);
  return r;
}

}  // namespace gradsync::transport

namespace gradsync::transport::detail {

GRADSYNC_DECL shm_state::shm_state(const shm_options& o)
    : shm_state(o, deadline::after(o.bootstrap_timeout.count() < 0 ? default_timeout()
                                                                   : o.bootstrap_timeout)) {}

GRADSYNC_DECL shm_state::shm_state(const shm_options& o, deadline until)
    : roster_(o.rank, geometry(o).ranks, o.job, until),
      seg_(o.rank, geometry(o), o.job, until, &roster_),
      rank_(o.rank),
      size_(o.size),
      p2p_(seg_, o.rank),
      heap_(seg_.layout().geo.heap_bytes),
      spin_(spin_budget::for_group(o.size)),
      seq_(o.first_seq),
      job_ranks_(sub_group_ranks(o)),
      opts_(o) {
  // Every rank has attached; a second job's process that came meanwhile has had its say.
  try {
    roster_.settle(until);
  } catch (const error& e) {
    mark_failed(e.what());
    throw;
  }
}

GRADSYNC_DECL shm_state::~shm_state() {
  auto st = shared_word(seg_.ctl(rank_).state);
  // A failed group makes no more calls, so its job id is free: a stopped or hung peer
  // that holds its claim (and may later be killed) must not keep the roster's name.
  if (st.load(std::memory_order_relaxed) == rs_failed) {
    roster_.retire();
  } else {
    st.store(rs_left, std::memory_order_release);
  }
  wake_all();
}

GRADSYNC_DECL shm_geometry shm_state::geometry(const shm_options& o) {
  if (o.size == 0 || o.rank >= o.size) {
    throw error(errc::invalid_argument, {o.rank, error_site::npos, ~std::uint64_t{0}},
                "shm rank " + std::to_string(o.rank) + " is out of range for size " +
                    std::to_string(o.size));
  }
  if (o.job.empty()) {
    throw error(errc::invalid_argument, {o.rank, error_site::npos, ~std::uint64_t{0}},
                "shm_options::job is empty; give every process of the job the same id");
  }
  // The segment's size, computed without wrapping (each term padded for its rounding
  // and header): sizes whose layout would not fit are refused here, not mapped as a
  // tiny segment that the offsets run past.
  const std::size_t n = o.size, pad = page_bytes + cache_line;
  std::size_t total = 0, pairs = 0;
  auto mul_add = [&total](std::size_t a, std::size_t b) {
    std::size_t m = 0;
    return !__builtin_mul_overflow(a, b, &m) && !__builtin_add_overflow(total, m, &total);
  };
  const bool fits = o.slot_bytes < total_limit && o.ring_bytes < total_limit &&
                    o.exchange_bytes < total_limit && o.heap_bytes < total_limit &&
                    mul_add(n, 2 * o.slot_bytes + o.exchange_bytes + o.heap_bytes + 6 * pad) &&
                    !__builtin_mul_overflow(n, n, &pairs) && mul_add(pairs, o.ring_bytes + pad) &&
                    total < total_limit;
  if (!fits) {
    throw error(errc::invalid_argument, {o.rank, error_site::npos, ~std::uint64_t{0}},
                "shm sizes too large: " + std::to_string(n) + " ranks with slot " +
                    std::to_string(o.slot_bytes) + ", ring " + std::to_string(o.ring_bytes) +
                    ", exchange " + std::to_string(o.exchange_bytes) + " and heap " +
                    std::to_string(o.heap_bytes) + " bytes need a segment over 2^56 bytes");
  }
  return {o.size, round_up(o.slot_bytes, cache_line),
          round_up(std::max<std::size_t>(o.ring_bytes, 4096), page_bytes),
          round_up(std::max<std::size_t>(o.exchange_bytes, 2 * page_bytes), 2 * page_bytes),
          round_up(o.heap_bytes, page_bytes)};
}

GRADSYNC_DECL std::string shm_state::describe(std::size_t q) const {
  std::string s = "rank " + std::to_string(job_rank(q));
  return opts_.host.empty() ? s : s + " on " + opts_.host;
}

GRADSYNC_DECL void shm_state::report_stall() const {
  std::vector<peer_position> where;
  for (std::size_t q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    where.push_back(
        {q, describe(q), true, shared_word(seg_.ctl(q).entered).load(std::memory_order_relaxed)});
  }
  stall_.warn(job_rank(rank_), describe(rank_), where);
}

GRADSYNC_DECL error_site shm_state::site(std::size_t peer) const {
  error_site s{rank_, peer, seq_ - 1};
  s.host = opts_.host;
  if (peer < size_) s.peer_host = opts_.host;
  if (job_ranks_.empty()) return s;
  s.rank = job_ranks_[rank_];
  s.peer = peer < size_ ? job_ranks_[peer] : peer;
  s.group_rank = rank_;
  s.group_peer = peer < size_ ? peer : error_site::npos;
  s.group_size = size_;
  return s;
}

GRADSYNC_DECL std::vector<std::size_t> shm_state::sub_group_ranks(const shm_options& o) {
  if (o.job_ranks.size() != o.size) return {};
  for (std::size_t r = 0; r < o.size; ++r) {
    if (o.job_ranks[r] != r) return o.job_ranks;
  }
  return {};
}

GRADSYNC_DECL void shm_state::fail(errc code, std::size_t peer, const std::string& what) {
  error e(code, site(peer), what);
  if (code == errc::timeout || code == errc::peer_lost || code == errc::aborted) {
    mark_failed(e.what());
  }
  throw e;
}

GRADSYNC_DECL void shm_state::mark_failed(const char* cause) noexcept {
  rank_ctl& me = seg_.ctl(rank_);
  if (!broken_) {
    const std::size_t n = ::strnlen(cause, rank_cause_bytes - 1);
    std::memcpy(me.cause, cause, n);
    me.cause[n] = '\0';
  }
  shared_word(me.state).store(rs_failed, std::memory_order_release);
  wake_all();
  broken_ = true;
}

GRADSYNC_DECL std::string shm_state::failure_notice() const {
  for (std::size_t q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const rank_ctl& c = seg_.ctl(q);
    if (shared_word(c.state).load(std::memory_order_acquire) != rs_failed) continue;
    const std::string cause = peer_cause(c);
    if (!cause.empty()) {
      return "rank " + std::to_string(site(q).peer) +
             (opts_.host.empty() ? "" : " on " + opts_.host) + " failed" + cause;
    }
  }
  return {};
}

GRADSYNC_DECL void shm_state::check_usable() {
  // An aborted rank is marked failed, so that its peers stop waiting for it at once.
  if (abort_.raised() && !broken_)
    fail(errc::aborted, error_site::npos, abort_message("before this call"));
  if (broken_) {
    throw error(errc::transport, site(error_site::npos),
                "this shm transport failed earlier (timeout, lost peer or cancelled message); "
                "destroy it and create a new one");
  }
}

}  // namespace gradsync::transport::detail

namespace gradsync::transport {

GRADSYNC_DECL shm_options shm_options::from_env() {
  shm_launch l = shm_launch_from_env();
  shm_options o;
  o.rank = l.rank;
  o.size = l.size;
  o.job = std::move(l.job);
  if (const char* h = std::getenv("GRADSYNC_SHM_HEAP"))
    o.heap_bytes = env_bytes("GRADSYNC_SHM_HEAP", h);
  if (log_enabled(log_level::info)) {
    log(log_level::info, o.rank, "shm group from %s: rank %zu of %zu, job '%s'", l.source.c_str(),
        o.rank, o.size, o.job.c_str());
  }
  return o;
}

GRADSYNC_DECL std::size_t shm_options::env_bytes(const char* var, const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  const std::string unit = end ? end : "";
  const int shift = unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : 0;
  if (end == s || *s < '0' || *s > '9' || (!unit.empty() && shift == 0) || errno == ERANGE ||
      v > (~0ull >> shift)) {
    throw error(errc::invalid_argument, {},
                std::string(var) +
                    " must be a byte count with an optional K, M or G suffix, got '" + s + "'");
  }
  return static_cast<std::size_t>(v << shift);
}

}  // namespace gradsync::transport
