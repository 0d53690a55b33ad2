// SPDX-License-Identifier: Apache-2.0
// transport::mpi's functions (mpi.hpp declares them): inline in a header-only build,
// compiled once by <gradsync/src_mpi.hpp> under GRADSYNC_SEPARATE_COMPILATION
// (config.hpp).
#pragma once

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradsync/transport/mpi.hpp"

namespace gradsync::transport {

GRADSYNC_DECL void mpi::request::cancel() noexcept {
  bool settled = true;  // MPI no longer reads or writes the buffer
  if (parts_ && detail::mpi_usable()) {
    for (std::size_t i = next_; i < parts_; ++i) settled = cancel_one(part(i)) && settled;
  }
  drop_stage(settled);
  reset();
}

GRADSYNC_DECL bool mpi::request::cancel_one(MPI_Request& q) const noexcept {
  if (q == MPI_REQUEST_NULL) return true;
  MPI_Cancel(&q);
  const auto until =
      clock::now() + (is_send_ ? std::chrono::milliseconds(1) : std::chrono::milliseconds(200));
  int done = 0;
  while (!done && MPI_Test(&q, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
         clock::now() < until) {
    sched_yield();
  }
  if (!done && q != MPI_REQUEST_NULL) {
    MPI_Request_free(&q);
    return false;
  }
  return true;
}

GRADSYNC_DECL mpi::mpi(MPI_Comm comm, mpi_options opt) : opt_(opt) {
  check_usable_and_options(comm);
  if (opt_.ignore_sigpipe) detail::ignore_default_sigpipe();
  // MPI fills the new handle in when the idup completes: give it storage that outlives
  // a timed-out constructor (a collective cannot be cancelled, so that one is leaked).
  auto slot = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request req = MPI_REQUEST_NULL;
  detail::check_mpi(MPI_Comm_idup(comm, slot.get(), &req), "MPI_Comm_idup", {});
  const int rc = detail::poll_collective(
      req, deadline::after(default_timeout()), [&] { (void)slot.release(); }, {},
      "MPI_Comm_idup (every rank of the communicator constructs transport::mpi)");
  detail::check_mpi(rc, "MPI_Comm_idup", {});
  comm_ = *slot;
  adopt();
}

GRADSYNC_DECL std::string mpi::describe_rank(std::size_t q) const {
  if (q >= size_ || world_.size() != size_) return "rank " + std::to_string(q);
  return "rank " + std::to_string(world_[q]) + " on " + names_[q];
}

GRADSYNC_DECL void mpi::peer_failed() const {
  const std::size_t from = stall_.notice_from();
  throw error(errc::peer_lost, site(from),
              describe_rank(from) + " failed and told this rank why: " + stall_.notice());
}

GRADSYNC_DECL std::string mpi::silent_peers() {
  return stall_.silent_peers(comm_, rank_, std::chrono::milliseconds(500),
                             [this](std::size_t q) { return describe_rank(q); });
}

GRADSYNC_DECL error_site mpi::native_site(const call_context& ctx) const {
  error_site where{rank_, error_site::npos, ctx.seq};
  if (native_stuck_) {
    throw error(errc::transport, where,
                "an earlier native collective on this transport timed out and is still "
                "pending inside MPI, so later collectives would pair up wrongly; create a "
                "new transport::mpi");
  }
  return where;
}

GRADSYNC_DECL int mpi::one_call_count(std::size_t count, const char* call,
                                      const error_site& where) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw error(errc::invalid_argument, where,
                std::string(call) + " of " + std::to_string(count) +
                    " elements exceeds one MPI call's int count");
  }
  return static_cast<int>(count);
}

GRADSYNC_DECL void mpi::native_wait(MPI_Request& req, std::size_t bytes, const char* call,
                                    const std::string& what, const error_site& where,
                                    deadline until) {
  MPI_Status st;
  const int rc =
      detail::mpi_poll(req, st, until, bytes >= detail::mpi_bulk_bytes, &abort_, stall_poll());
  if (rc == detail::mpi_poll_timed_out || rc == detail::mpi_poll_aborted ||
      rc == detail::mpi_poll_peer_failed) {
    abandoned_.push_back(req);
    native_stuck_ = true;
    clean_ = false;
    if (rc == detail::mpi_poll_aborted) {
      abort_switch::throw_aborted(where, std::string("while this rank waited in ") + call);
    }
    if (rc == detail::mpi_poll_peer_failed) peer_failed();
    const std::string silent = silent_peers();
    if (stall_.notice_from() != detail::mpi_stall::no_notice) peer_failed();
    throw error(errc::timeout, where,
                "deadline passed in " + std::string(call) + " of " + what +
                    " (some rank did not join; set GRADSYNC_TIMEOUT or "
                    "call_options::timeout to wait longer)" +
                    silent);
  }
  detail::check_mpi(rc, call, where);
}

GRADSYNC_DECL void mpi::wait(request& r, deadline d) {
  if (abort_.raised()) aborted(r, "before this rank could ");
  if (stall_.notice_from() != detail::mpi_stall::no_notice) {
    give_up(r);
    peer_failed();
  }
  while (r.next_ < r.parts_) {
    MPI_Request& q = r.part(r.next_);
    MPI_Status st;
    // Bulk by the whole transfer: its messages may each be small (network_message_bytes).
    const int rc =
        detail::mpi_poll(q, st, d, r.bytes_ >= detail::mpi_bulk_bytes, &abort_, stall_poll());
    if (rc == detail::mpi_poll_aborted) aborted(r, "while this rank waited to ");
    if (rc == detail::mpi_poll_peer_failed) {
      give_up(r);
      peer_failed();
    }
    if (rc == detail::mpi_poll_timed_out) {
      const std::size_t peer = r.peer_, bytes = r.bytes_;
      const std::uint32_t tag = r.tag_;
      const bool send = r.is_send_;
      give_up(r);
      const std::string silent = silent_peers();
      if (stall_.notice_from() != detail::mpi_stall::no_notice) peer_failed();
      throw error(errc::timeout, site(peer),
                  std::string("deadline passed while waiting to ") + (send ? "send " : "receive ") +
                      std::to_string(bytes) + " bytes " + (send ? "to" : "from") +
                      " the peer (tag " + std::to_string(tag) +
                      "; set GRADSYNC_TIMEOUT or call_options::timeout to wait longer)" + silent);
    }
    if (rc != MPI_SUCCESS) fail(r, rc);
    if (!r.is_send_) {
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      if (static_cast<std::size_t>(got) != r.piece_bytes(r.next_)) {
        const std::size_t peer = r.peer_, bytes = r.bytes_;
        const std::size_t sent = r.next_ * r.piece_ + static_cast<std::size_t>(got);
        give_up(r);
        throw error(errc::mismatch, site(peer),
                    "message size differs: this rank expected " + std::to_string(bytes) +
                        " bytes, the peer sent " + std::to_string(sent));
      }
    }
    ++r.next_;
  }
  r.drop_stage(true);
  r.reset();
}

GRADSYNC_DECL std::string mpi::serve_peers(std::uint64_t blocked_on) {
  if (comm_ == MPI_COMM_NULL) return {};
  if (!stall_.serve(std::chrono::steady_clock::now(), comm_, blocked_on)) return {};
  return failure_notice();
}

GRADSYNC_DECL std::string mpi::failure_notice() {
  if (comm_ == MPI_COMM_NULL || !stall_.take_notice(comm_)) return {};
  return describe_rank(stall_.notice_from()) + " failed and told this rank why: " + stall_.notice();
}

GRADSYNC_DECL mpi mpi::split(int color, int key, deadline d) {
  if (color < 0) {
    throw error(errc::invalid_argument, site(error_site::npos),
                "split color must be >= 0 (every rank joins exactly one group)");
  }
  std::vector<detail::split_entry> all;  // all[q]: rank q's colour and key
  gradsync::detail::allgather_pod(*this, detail::split_entry{color, key}, all, data_tag(next_seq()),
                                  d);
  // The new group's places follow from this one's (no exchange in the new group).
  const std::vector<std::size_t> members = detail::split_members(all, color);
  std::vector<detail::rank_place> places(members.size());
  for (std::size_t k = 0; k < members.size(); ++k) {
    const std::size_t q = members[k];
    std::size_t lead = 0;
    while (host_[members[lead]] != host_[q]) ++lead;
    places[k] = {static_cast<int>(world_[q]), static_cast<int>(lead), names_[q]};
  }
  MPI_Comm c = MPI_COMM_NULL;
  detail::check_mpi(MPI_Comm_split(comm_, color, key, &c), "MPI_Comm_split",
                    site(error_site::npos));
  mpi child(c, opt_, std::move(places), adopt_tag{});  // opt_ holds this transport's cut
  child.link_gbps_ = link_gbps_;
  return child;
}

GRADSYNC_DECL void mpi::broadcast_native(std::byte* data, std::size_t bytes, std::size_t root,
                                         const call_context& ctx) {
  const error_site where = native_site(ctx);
  const std::size_t chunk = std::max<std::size_t>(1, opt_.max_message_bytes);
  for (std::size_t off = 0; off < bytes; off += chunk) {
    const int len = static_cast<int>(std::min(chunk, bytes - off));
    MPI_Request req = MPI_REQUEST_NULL;
    detail::check_mpi(MPI_Ibcast(data + off, len, MPI_BYTE, static_cast<int>(root), comm_, &req),
                      "MPI_Ibcast", where);
    native_wait(req, static_cast<std::size_t>(len), "MPI_Ibcast",
                std::to_string(bytes) + " bytes from rank " + std::to_string(root), where,
                ctx.until);
  }
}

GRADSYNC_DECL void mpi::allgather_native(const std::byte* in, std::byte* out, std::size_t bytes,
                                         const call_context& ctx) {
  const error_site where = native_site(ctx);
  const int len = one_call_count(bytes, "MPI_Iallgather", where);
  MPI_Request req = MPI_REQUEST_NULL;
  // In place (gradsync::allgather allows no other overlap): MPI forbids aliased buffers.
  const void* send = in == out + rank() * bytes ? MPI_IN_PLACE : in;
  detail::check_mpi(MPI_Iallgather(send, len, MPI_BYTE, out, len, MPI_BYTE, comm_, &req),
                    "MPI_Iallgather", where);
  native_wait(req, bytes, "MPI_Iallgather", std::to_string(bytes) + " bytes per rank", where,
              ctx.until);
}

GRADSYNC_DECL void mpi::require_thread_level(int needed) {
  if (!detail::mpi_usable()) {
    throw error(errc::invalid_argument, {},
                "MPI is not initialized; call MPI_Init_thread(&argc, &argv, " +
                    detail::mpi_thread_level_name(needed) + ", &provided) first");
  }
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  check_thread_level(provided, needed);
}

GRADSYNC_DECL bool mpi::allows_helper_thread() {
  int provided = MPI_THREAD_SINGLE;
  if (detail::mpi_usable()) MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_SERIALIZED;
}

GRADSYNC_DECL void mpi::check_thread_level(int provided, int needed) {
  if (provided >= needed) return;
  const std::string want = detail::mpi_thread_level_name(needed);
  throw error(errc::invalid_argument, {},
              "MPI provides " + detail::mpi_thread_level_name(provided) + " but this needs " +
                  want + (needed == MPI_THREAD_SERIALIZED ? " or MPI_THREAD_MULTIPLE" : "") +
                  ": initialize MPI with MPI_Init_thread(&argc, &argv, " + want +
                  ", &provided) and check `provided`");
}

GRADSYNC_DECL mpi::mpi(MPI_Comm owned, mpi_options opt, std::vector<detail::rank_place> places,
                       adopt_tag)
    : comm_(owned), opt_(opt) {
  adopt(std::move(places));
}

GRADSYNC_DECL void mpi::check_usable_and_options(MPI_Comm comm) const {
  if (!detail::mpi_usable()) {
    throw error(errc::invalid_argument, {},
                "MPI is not initialized (or already finalized); call MPI_Init_thread before "
                "creating transport::mpi");
  }
  if (comm == MPI_COMM_NULL) {
    throw error(errc::invalid_argument, {},
                "transport::mpi needs a communicator, not MPI_COMM_NULL");
  }
  if (opt_.max_message_bytes == 0 || opt_.max_message_bytes > static_cast<std::size_t>(INT_MAX)) {
    throw error(errc::invalid_argument, {},
                "mpi_options::max_message_bytes must be in [1, INT_MAX], got " +
                    std::to_string(opt_.max_message_bytes));
  }
  if (opt_.network_message_bytes > static_cast<std::size_t>(INT_MAX) &&
      opt_.network_message_bytes != mpi_options::network_auto) {
    throw error(errc::invalid_argument, {},
                "mpi_options::network_message_bytes must be in [0, INT_MAX] (0: no split) or "
                "mpi_options::network_auto, got " +
                    std::to_string(opt_.network_message_bytes));
  }
}

GRADSYNC_DECL void mpi::adopt(std::vector<detail::rank_place> places) {
  try {
    detail::check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
                      {});
    int r = 0, n = 0;
    detail::check_mpi(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank", {});
    detail::check_mpi(MPI_Comm_size(comm_, &n), "MPI_Comm_size", {});
    rank_ = static_cast<std::size_t>(r);
    size_ = static_cast<std::size_t>(n);
    find_hosts(std::move(places));
    stall_.setup(size_);
    stage_ = std::make_shared<detail::mpi_stage_pool>(
        opt_.stage_limit_bytes, opt_.stage_limit_bytes > 0 && detail::thp_available(), rank_);
    choose_network_cut();
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
  log(log_level::debug, rank_,
      "transport::mpi: rank %zu of %zu%s, link %.2f Gbit/s measured (0: not measured), max "
      "message %zu bytes (%zu to other hosts), sends of %zu..%zu bytes staged through huge "
      "pages: %s",
      rank_, size_, network_ ? " across hosts" : " on one host", link_gbps_, opt_.max_message_bytes,
      opt_.network_message_bytes ? std::min(opt_.network_message_bytes, opt_.max_message_bytes)
                                 : opt_.max_message_bytes,
      opt_.stage_min_bytes, detail::mpi_stage_pool::page,
      stage_->enabled() ? "yes" : "no (stage_limit_bytes 0 or transparent huge pages off)");
}

GRADSYNC_DECL void mpi::find_hosts(std::vector<detail::rank_place> all) {
  if (all.empty()) all = detail::place_ranks(comm_, deadline::after(default_timeout()));
  if (all.size() != size_) {
    throw error(errc::transport, site(error_site::npos),
                "MPI_Comm_split made a group of " + std::to_string(size_) + " ranks, expected " +
                    std::to_string(all.size()));
  }
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  sub_group_ = static_cast<std::size_t>(world_size) != size_;
  host_.resize(size_);
  world_.resize(size_);
  names_.resize(size_);
  for (std::size_t r = 0; r < size_; ++r) {
    host_[r] = static_cast<std::uint32_t>(all[r].leader);
    world_[r] = static_cast<std::size_t>(all[r].world);
    names_[r] = all[r].host;
    sub_group_ = sub_group_ || world_[r] != r;
  }
  const bool spans =
      std::any_of(host_.begin(), host_.end(), [&](std::uint32_t h) { return h != host_[0]; });
  network_ = opt_.network == network_hint::yes || (opt_.network == network_hint::detect && spans);
}

GRADSYNC_DECL void mpi::choose_network_cut() {
  if (opt_.network_message_bytes != mpi_options::network_auto) return;
  opt_.network_message_bytes = 0;
  // Every rank holds the same host table, so all of them take the same branch.
  std::vector<std::size_t> leaders;  // each host's lowest rank, in rank order
  for (std::size_t r = 0; r < size_; ++r) {
    if (host_[r] == r) leaders.push_back(r);
  }
  // network_hint::no: the program asked to be tuned as on one host.
  if (!detail::network_cut_helps || leaders.size() < 2 || opt_.network == network_hint::no) return;
  const deadline until = deadline::after(default_timeout());
  const std::uint32_t tag = data_tag(next_seq());
  double best = 0;  // seconds: this leader's fastest round; 0 on the other ranks
  const auto me = std::find(leaders.begin(), leaders.end(), rank_);
  if (me != leaders.end()) {
    const std::size_t h = leaders.size(), i = static_cast<std::size_t>(me - leaders.begin());
    const std::size_t to = leaders[(i + 1) % h], from = leaders[(i + h - 1) % h];
    std::vector<std::byte> out(detail::link_probe_bytes, std::byte{1}),
        in(detail::link_probe_bytes);
    for (std::size_t k = 0; k < detail::link_probe_rounds; ++k) {
      const auto t0 = clock::now();
      request rq = irecv(from, in.data(), in.size(), tag);
      request sq = isend(to, out.data(), out.size(), tag);
      wait(sq, until);
      wait(rq, until);
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      best = k == 0 ? s : std::min(best, s);
    }
  }
  std::vector<double> all;
  gradsync::detail::allgather_pod(*this, best, all, data_tag(next_seq()), until);
  const double slowest = *std::max_element(all.begin(), all.end());
  link_gbps_ = slowest > 0 ? static_cast<double>(detail::link_probe_bytes) * 8 / slowest / 1e9 : 0;
  if (link_gbps_ > 0 && link_gbps_ < detail::cut_below_gbps) {
    opt_.network_message_bytes = detail::network_cut_bytes;
  }
}

GRADSYNC_DECL void mpi::release() noexcept {
  if (comm_ == MPI_COMM_NULL) return;
  if (detail::mpi_usable()) {
    for (MPI_Request& q : abandoned_) {
      int done = 0;
      MPI_Test(&q, &done, MPI_STATUS_IGNORE);  // if the late ranks joined, it is done
    }
    ops_.release();
    const bool keep = !clean_ || stall_.had_traffic();
    stall_.release(comm_);
    // After a failed wait or stall-board traffic a peer may still send here. Freed, the
    // communicator's context id is reused by the next one created, and that late message
    // lands in it and breaks MPI's per-peer message order there (a hang in the next
    // MPI_Comm_split). So such a communicator is left allocated, on purpose.
    if (!keep) MPI_Comm_free(&comm_);  // pending operations still complete; MPI frees it after
  }
  comm_ = MPI_COMM_NULL;
}

GRADSYNC_DECL void mpi::swap(mpi& o) noexcept {
  std::swap(comm_, o.comm_);
  std::swap(rank_, o.rank_);
  std::swap(size_, o.size_);
  std::swap(opt_, o.opt_);
  std::swap(seq_, o.seq_);
  std::swap(abort_, o.abort_);
  std::swap(stall_, o.stall_);
  std::swap(scratch_, o.scratch_);
  std::swap(stage_, o.stage_);
  std::swap(ops_, o.ops_);
  std::swap(abandoned_, o.abandoned_);
  std::swap(native_stuck_, o.native_stuck_);
  std::swap(clean_, o.clean_);
  std::swap(network_, o.network_);
  std::swap(link_gbps_, o.link_gbps_);
  std::swap(host_, o.host_);
  std::swap(world_, o.world_);
  std::swap(names_, o.names_);
  std::swap(sub_group_, o.sub_group_);
}

GRADSYNC_DECL error_site mpi::site(std::size_t peer) const {
  if (world_.size() != size_) return {rank_, peer, seq_ - 1};
  error_site s{world_[rank_], peer < size_ ? world_[peer] : peer, seq_ - 1};
  s.host = names_[rank_];
  if (peer < size_) s.peer_host = names_[peer];
  if (sub_group_) {
    s.group_rank = rank_;
    s.group_peer = peer < size_ ? peer : error_site::npos;
    s.group_size = size_;
  }
  return s;
}

GRADSYNC_DECL void mpi::aborted(request& r, const char* when) {
  const std::size_t peer = r.peer_, bytes = r.bytes_;
  const bool send = r.is_send_;
  give_up(r);
  abort_switch::throw_aborted(site(peer), when + std::string(send ? "send " : "receive ") +
                                              std::to_string(bytes) + " bytes " +
                                              (send ? "to" : "from") + " the peer");
}

GRADSYNC_DECL void mpi::fail(request& r, int rc) {
  const std::size_t peer = r.peer_, bytes = r.bytes_;
  const bool send = r.is_send_;
  give_up(r);
  if (detail::mpi_error_class(rc) == MPI_ERR_TRUNCATE) {
    throw error(errc::mismatch, site(peer),
                "message size differs: this rank expected " + std::to_string(bytes) +
                    " bytes and the peer sent more (" + detail::mpi_error_text(rc) + ")");
  }
  throw error(errc::transport, site(peer),
              std::string(send ? "MPI_Isend" : "MPI_Irecv") + " of " + std::to_string(bytes) +
                  " bytes failed: " + detail::mpi_error_text(rc));
}

GRADSYNC_DECL mpi::request mpi::post(bool is_send, std::size_t peer, void* buf, std::size_t bytes,
                                     std::uint32_t tag) {
  if (peer >= size_) {
    throw error(errc::invalid_argument, site(peer),
                "peer rank out of range (group of " + std::to_string(size_) + ")");
  }
  request r;
  r.peer_ = peer;
  r.tag_ = tag;
  r.is_send_ = is_send;
  r.bytes_ = bytes;
  r.piece_ = opt_.max_message_bytes;
  if (opt_.network_message_bytes && (!same_host(peer) || opt_.network == network_hint::yes)) {
    r.piece_ = std::min(r.piece_, opt_.network_message_bytes);
  }
  const std::size_t parts = bytes == 0 ? 1 : (bytes + r.piece_ - 1) / r.piece_;
  if (parts > 1) r.more_.assign(parts - 1, MPI_REQUEST_NULL);
  // Only a receiver on this host reads the send with process_vm_readv (see above).
  if (is_send && stage_ && bytes >= opt_.stage_min_bytes && host_[peer] == host_[rank_]) {
    if (auto b = stage_->acquire(bytes); b.ptr) {
      std::memcpy(b.ptr, buf, bytes);
      buf = b.ptr;
      r.pool_ = stage_;
      r.stage_ = b;
    }
  }
  auto* p = static_cast<std::byte*>(buf);
  for (std::size_t i = 0; i < parts; ++i) {
    const int len = static_cast<int>(r.piece_bytes(i));
    const int rc = is_send ? MPI_Isend(p + i * r.piece_, len, MPI_BYTE, static_cast<int>(peer),
                                       static_cast<int>(tag), comm_, &r.part(i))
                           : MPI_Irecv(p + i * r.piece_, len, MPI_BYTE, static_cast<int>(peer),
                                       static_cast<int>(tag), comm_, &r.part(i));
    r.parts_ = i + 1;  // the destructor cancels what was posted if a later piece fails
    if (rc != MPI_SUCCESS) fail(r, rc);
  }
  return r;
}

}  // namespace gradsync::transport
