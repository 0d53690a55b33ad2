// SPDX-License-Identifier: Apache-2.0
// The run-time face of gradsync that the torch.distributed backend talks to. gradsync's
// policies are compile-time; a process group picks its transport at run time (how it was
// launched, where its ranks are), so each transport gets one engine_impl<Transport,
// Algorithm> behind this small virtual interface. Neither torch nor MPI appears here: the
// engines compile without torch's headers, the process group without MPI's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gradsync/core/call.hpp>
#include <gradsync/core/dtype.hpp>
#include <gradsync/core/op.hpp>

namespace gradsync_torch {

/// What the DDP comm hooks run a bucket through: int8 and topk inside error_feedback;
/// exact (compress::exact<>: reproducible sums) alone.
enum class codec : std::uint8_t { int8, topk, exact };

/// One process group's communicator. Called from one thread at a time (the process
/// group's worker); every call blocks until done or throws gradsync::error.
class engine {
 public:
  virtual ~engine() = default;

  /// "shm", "mpi" or "two_level".
  virtual std::string_view transport() const = 0;
  /// The transport, its algorithm and its shape, for logs and tests.
  virtual std::string describe() const = 0;
  virtual std::size_t rank() const = 0;
  virtual std::size_t size() const = 0;

  /// In place over `count` elements of `type`. op avg on integer types sums, then divides
  /// with C++'s truncating division (gradsync's op::avg is floating-point only).
  virtual void allreduce(void* data, std::size_t count, gradsync::dtype type,
                         gradsync::reduce_op op, const gradsync::call_options& opt) = 0;
  /// `count` elements of `type` from `root` (other torch dtypes travel as int8 bytes).
  virtual void broadcast(void* data, std::size_t count, gradsync::dtype type, std::size_t root,
                         const gradsync::call_options& opt) = 0;
  /// out (size() * count elements) := every rank's `in` (count elements), in rank order.
  virtual void allgather(const void* in, void* out, std::size_t count, gradsync::dtype type,
                         const gradsync::call_options& opt) = 0;
  /// out (count elements) := block rank() of the reduction of every rank's `in`
  /// (size() * count elements); op avg on integers as allreduce.
  virtual void reduce_scatter(const void* in, void* out, std::size_t count, gradsync::dtype type,
                              gradsync::reduce_op op, const gradsync::call_options& opt) = 0;
  /// The average of `count` elements through codec `c`: int8 and topk inside
  /// compress::error_feedback (float32; other types are averaged uncompressed), exact
  /// through compress::exact<> (float32 only: its blocks start at each of `tensors`, the
  /// element counts of the bucket's tensors in order, so the bits do not depend on where
  /// the bucket's edges fall; empty: one tensor). State is kept per `bucket` (a DDP bucket
  /// index) while the bucket keeps its tensors, codec and type; a changed bucket starts
  /// afresh. Collective: the first call for a bucket commits a plan, which every rank
  /// must do in the same order.
  virtual void compressed_average(std::size_t bucket, void* data, std::size_t count,
                                  gradsync::dtype type, codec c,
                                  const std::vector<std::size_t>& tensors,
                                  const gradsync::call_options& opt) = 0;
  /// Makes the wait in flight and every later one fail (gradsync::errc::aborted). Any thread.
  virtual void abort() noexcept = 0;
};

/// What the engines need from the launcher's key-value store (the c10d Store), as plain
/// functions so that the engines compile without torch's headers.
struct kv_store {
  std::function<void(const std::string&, const std::string&)> set;
  std::function<std::string(const std::string&)> get;  ///< waits for the key (store timeout)
  std::function<std::int64_t(const std::string&, std::int64_t)> add;
};

/// Opens the engine of a process group of `size` ranks in which this process is `rank`
/// (launch.cpp): over MPI when an MPI launcher started the job and the group is the whole
/// job, else over shared memory on one host, bootstrapped through `store`. Collective.
std::unique_ptr<engine> open_engine(std::size_t rank, std::size_t size, gradsync::seconds_d timeout,
                                    const kv_store& store);

/// Ends MPI if open_engine started it and no engine failed; call after every engine is
/// gone (Python's atexit). The ranks meet first, waiting for a late one up to the longest
/// timeout of the MPI-launched groups (transport::finalize_job). A no-op otherwise.
void finalize_mpi() noexcept;

/// Records that an engine call failed: MPI is then left for the launcher to end.
void note_failure() noexcept;

}  // namespace gradsync_torch
