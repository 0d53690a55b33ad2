// SPDX-License-Identifier: Apache-2.0
// transport::checksummed<Tr>: every message carries a 64-bit hash of its bytes
// (kernels::buffer_hash), checked when its receive completes. Bytes damaged between two
// ranks (a faulty link, NIC, memory or transport) then fail the call with errc::mismatch
// naming the sender, instead of a partial sum changed in flight that every rank would
// hold alike (which result verification cannot see: docs/reliability.md). Opt-in: it
// costs one hash pass over every byte sent and received, and a 16-byte message each.
//
//   gradsync::transport::mpi world(MPI_COMM_WORLD);
//   gradsync::transport::checksummed<gradsync::transport::mpi> t(world);
//   gradsync::allreduce<gradsync::algo::ring>(t, std::span<float>(grad), gradsync::op::sum);
//
// The hash follows its message with the same tag, so Tr must deliver the messages of one
// (peer, tag) in the order they were sent, as MPI and gradsync's transports do. Reads of
// peer memory bypass messages, so peer_access is off (the direct algorithms are refused).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "gradsync/core/deadline.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/core/stall.hpp"
#include "gradsync/core/workspace.hpp"
#include "gradsync/kernels/hash.hpp"
#include "gradsync/transport/concept.hpp"

namespace gradsync::transport {

template <transport_policy Tr>  ///< the host-memory transport whose messages are checked
class checksummed {
  static_assert(Tr::memory == memory_space::host,
                "gradsync: transport::checksummed hashes host buffers; a device transport "
                "(nccl, cuda_ipc, mpi_device) cannot be wrapped");
  static constexpr transport_traits inner = transport_traits_of<Tr>();

  /// What follows each message: its hash and its length as sent.
  struct trailer {
    std::uint64_t hash = 0;
    std::uint64_t bytes = 0;
  };

 public:
  static constexpr std::string_view name = "checksummed";
  static constexpr memory_space memory = memory_space::host;
  static constexpr bool peer_access = false;  // peer reads would bypass the check
  static constexpr bool native_allreduce = false;
  /// Tr's pipeline shape, and those of its extras the wrapper forwards (below).
  static constexpr transport_traits traits{.pipeline_segment_bytes = inner.pipeline_segment_bytes,
                                           .ring_send_lag = inner.ring_send_lag,
                                           .pieces_in_flight = inner.pieces_in_flight,
                                           .may_cross_network = inner.may_cross_network,
                                           .watches_stalls = inner.watches_stalls,
                                           .aborts = inner.aborts};

  /// A message and its trailer; a receive is checked once, by wait().
  struct request {
    // Declared first, so destroyed last: an unfinished inner request may still be copied
    // to or from the trailer until its own destructor has withdrawn it.
    std::unique_ptr<trailer> t;  // stays put while the request moves
    typename Tr::request data, tail;
    const void* buf = nullptr;  // a receive's bytes
    std::size_t bytes = 0, peer = 0;
    std::uint32_t tag = 0;
    bool unchecked = false;  // a receive whose hash is still to compare

    request() = default;
    request(request&&) noexcept = default;
    // The inner requests first: assigning them withdraws unfinished old ones, which may
    // still use the old trailer.
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        data = std::move(o.data);
        tail = std::move(o.tail);
        t = std::move(o.t);
        buf = o.buf;
        bytes = o.bytes;
        peer = o.peer;
        tag = o.tag;
        unchecked = std::exchange(o.unchecked, false);
      }
      return *this;
    }
  };

  /// Wraps `t`, which must outlive this wrapper.
  explicit checksummed(Tr& t) : t_(t) {}

  std::size_t rank() const { return t_.rank(); }
  std::size_t size() const { return t_.size(); }
  std::uint64_t next_seq() { return t_.next_seq(); }
  workspace& scratch() { return t_.scratch(); }
  auto executor() const { return t_.executor(); }

  request isend(std::size_t peer, const void* p, std::size_t bytes, std::uint32_t tag) {
    request r;
    r.t = std::make_unique<trailer>(trailer{kernels::buffer_hash(p, bytes), bytes});
    r.data = t_.isend(peer, p, bytes, tag);
    r.tail = t_.isend(peer, r.t.get(), sizeof(trailer), tag);
    r.peer = peer;
    r.tag = tag;
    return r;
  }

  request irecv(std::size_t peer, void* p, std::size_t bytes, std::uint32_t tag) {
    request r;
    r.t = std::make_unique<trailer>();
    r.data = t_.irecv(peer, p, bytes, tag);
    r.tail = t_.irecv(peer, r.t.get(), sizeof(trailer), tag);
    r.buf = p;
    r.bytes = bytes;
    r.peer = peer;
    r.tag = tag;
    r.unchecked = true;
    return r;
  }

  /// Completes both messages; a receive whose bytes do not hash to what the sender sent
  /// throws errc::mismatch naming the sender.
  void wait(request& r, deadline d) {
    t_.wait(r.data, d);
    t_.wait(r.tail, d);
    if (!r.unchecked) return;
    r.unchecked = false;
    const std::uint64_t got = kernels::buffer_hash(r.buf, r.bytes);
    if (r.t->bytes == r.bytes && r.t->hash == got) return;
    throw error(
        errc::mismatch, {t_.rank(), r.peer, ~std::uint64_t{0}},
        "transport::checksummed: the message of tag " + std::to_string(r.tag) + " from rank " +
            std::to_string(r.peer) + " arrived damaged (" +
            (r.t->bytes != r.bytes
                 ? "the sender sent " + std::to_string(r.t->bytes) + " bytes, this rank expected " +
                       std::to_string(r.bytes)
                 : "its " + std::to_string(r.bytes) + " bytes do not hash to the sender's hash") +
            "): a faulty link, memory or transport between the two ranks, or a peer "
            "running another call");
  }

  bool crosses_network() const requires(inner.may_cross_network) { return t_.crosses_network(); }
  void enter_call(std::uint64_t seq, const call_note& note) requires(inner.watches_stalls) {
    t_.enter_call(seq, note);
  }
  void abort() noexcept requires(inner.aborts) { t_.abort(); }

 private:
  Tr& t_;
};

}  // namespace gradsync::transport
