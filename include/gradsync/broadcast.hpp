// SPDX-License-Identifier: Apache-2.0
// gradsync::broadcast — the root's `data` to every rank (in place: every other rank's
// buffer is overwritten). With the same guarantees as allreduce: a deadline on every
// wait, the call's arguments (count, type, root) agreed across ranks before data moves
// (errc::mismatch naming the ranks), the same bytes on every rank (call_options::verify
// checks it). On shm the others read the root's memory (algo::broadcast_direct); else a
// binomial tree below algo::broadcast_chain::min_bytes or on 2 ranks, or a segmented
// chain (MPI's own on mpi below 16 MiB). Over levels (transport/levels.hpp) the data crosses
// the network once per node (from the root's node along the root's local index), then
// spreads inside each node.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gradsync/algo/broadcast_chain.hpp"
#include "gradsync/algo/broadcast_direct.hpp"
#include "gradsync/algo/broadcast_tree.hpp"
#include "gradsync/allreduce.hpp"
#include "gradsync/check/call_frame.hpp"
#include "gradsync/core/call.hpp"
#include "gradsync/core/device_memory.hpp"
#include "gradsync/core/dtype.hpp"
#include "gradsync/core/error.hpp"
#include "gradsync/detail/host_collective.hpp"
#include "gradsync/detail/native_collectives.hpp"
#include "gradsync/transport/concept.hpp"
#include "gradsync/transport/levels.hpp"

namespace gradsync {

namespace detail {
/// The broadcast algorithm for `bytes` over `n` ranks of Tr (the same choice on every
/// rank): Tr's native broadcast (detail/native_collectives.hpp), the chain or the tree.
/// `flat`: a call of its own, where a peer-memory transport reads the root's memory.
template <class Tr>
std::string_view broadcast_algo(std::size_t bytes, std::size_t n, bool flat = false) {
  if (flat && has_direct_collectives<Tr>) return algo::broadcast_direct::name;
  if (use_native_collective(has_native_broadcast<Tr>, bytes)) return native_collective_name;
  return bytes >= algo::broadcast_chain::min_bytes && n > 2 ? algo::broadcast_chain::name
                                                            : algo::broadcast_tree::name;
}

/// Runs the chosen algorithm over one flat transport; returns the bytes sent (native:
/// the message on the root, 0 elsewhere, what it handed to the transport).
template <transport_policy Tr>
std::size_t run_broadcast(Tr& t, std::span<std::byte> data, std::size_t root,
                          const call_context& ctx) {
  const std::string_view a = broadcast_algo<Tr>(data.size(), t.size());
  if constexpr (has_native_broadcast<Tr>) {
    if (a == native_collective_name) {
      t.broadcast_native(data.data(), data.size(), root, ctx);
      return t.rank() == root ? data.size() : 0;
    }
  }
  if (a == algo::broadcast_chain::name) return algo::broadcast_chain::run(t, data, root, ctx);
  return algo::broadcast_tree::run(t, data, root, ctx);
}

/// Throws errc::invalid_argument unless `root` is one of `n` ranks (every rank passed
/// the same root by then, so every rank throws).
inline void check_root(std::size_t root, std::size_t n, std::size_t rank, std::uint64_t seq) {
  if (root >= n) {
    throw error(errc::invalid_argument, {rank, error_site::npos, seq},
                "broadcast: root " + std::to_string(root) + " is not a rank of this transport (" +
                    std::to_string(n) + " ranks: 0.." + std::to_string(n - 1) + ")");
  }
}

/// A broadcast over one flat transport, its call numbered and checked.
template <transport_policy Tr>
std::size_t broadcast_bytes(Tr& t, std::span<std::byte> data, std::size_t root, dtype type,
                            const call_options& opt) {
  const std::size_t count = data.size() / dtype_size(type);
  const std::string_view algo_name = broadcast_algo<Tr>(data.size(), t.size(), true);
  const call_frame<Tr> f(t, opt, {"broadcast", algo_name, type, reduce_op::sum, count, {}});
  const call_context& ctx = f.context();
  std::size_t sent = 0;
  f.run([&] {
    const call_header h = f.header(0, root);
    if constexpr (has_direct_collectives<Tr>) {  // its header round is the agreement
      sent = algo::broadcast_direct::run(t, data, root, h, ctx, [&](std::size_t q) {
        check_root(q, t.size(), t.rank(), ctx.seq);
      });
    } else {
      f.agree(h);
      check_root(root, t.size(), t.rank(), ctx.seq);
      sent = run_broadcast(t, data, root, ctx);
    }
    f.verify(data.data(), data.size());
  });
  return sent;
}

/// A broadcast over both levels of a group with levels, from global rank `root`.
template <transport::leveled Tr>
std::size_t broadcast_bytes(Tr& t, std::span<std::byte> data, std::size_t root, dtype type,
                            const call_options& opt) {
  const std::size_t count = data.size() / dtype_size(type), local = t.intra().size();
  // The name of the node level's choice (each level picks its own; Inter may go native).
  const std::string_view algo_name = broadcast_algo<typename Tr::intra_type>(data.size(), t.size());
  std::size_t sent = 0;
  const frame_for<Tr> f(t, opt, {"broadcast", algo_name, type, reduce_op::sum, count, {}},
                        {"broadcast inside the node", "broadcast across nodes"});
  f.run([&] {
    f.agree(algo_name, 0, root);
    check_root(root, t.size(), t.rank(), f.inside().seq);
    // The root's column carries the data across the nodes, then each node spreads it.
    if (t.intra().rank() == root % local) {
      sent += run_broadcast(t.inter(), data, root / local, f.across());
    }
    sent += run_broadcast(t.intra(), data, root % local, f.inside());
    f.verify(data.data(), data.size());
  });
  return sent;
}
}  // namespace detail

/// data := rank `root`'s data, on every rank (over levels, the global rank). Returns the
/// bytes this rank sent. Host memory; T an element type.
template <class Tr, class T>
std::size_t broadcast(Tr& t, std::span<T> data, std::size_t root, const call_options& opt = {}) {
  check_element_type<std::remove_const_t<T>>();
  static_assert(!std::is_const_v<T>,
                "gradsync::broadcast writes the buffer of every rank but the root; pass a "
                "std::span of non-const elements");
  detail::check_host_collective<Tr>();
  return detail::broadcast_bytes(t, std::as_writable_bytes(data), root,
                                 dtype_of<std::remove_const_t<T>>::value, opt);
}

/// data := rank `root`'s data on every rank, in device memory, enqueued on t's stream
/// (returns without waiting; t.synchronize(deadline) waits). Tr: a device transport with
/// its own broadcast (nccl: ncclBroadcast; mpi_device: MPI_Ibcast; cuda_ipc: a kernel).
template <class Tr, class T>
void broadcast(Tr& t, device_span<T> data, std::size_t root, const call_options& opt = {}) {
  detail::check_device_collective<Tr>();
  static_assert(!std::is_const_v<T>,
                "gradsync::broadcast writes the buffer of every rank but the root; pass a "
                "device_span of non-const elements");
  static_assert(!device_transport<Tr> || detail::has_native_broadcast<Tr>,
                "gradsync::broadcast on device memory needs a transport with its own "
                "broadcast: transport::nccl, transport::mpi_device or transport::cuda_ipc");
  if constexpr (device_transport<Tr> && detail::has_native_broadcast<Tr>) {
    check_element_type<T>();
    const detail::call_frame<Tr> f(t, opt,
                                   {"broadcast",
                                    detail::native_collective_name,
                                    dtype_of<T>::value,
                                    reduce_op::sum,
                                    data.size(),
                                    {}},
                                   detail::on_device);
    const call_context& ctx = f.context();
    detail::check_root(root, t.size(), t.rank(), ctx.seq);
    if (!data.empty()) {
      t.broadcast_native(reinterpret_cast<std::byte*>(data.data()), data.size_bytes(), root, ctx);
    }
  }
}

}  // namespace gradsync
