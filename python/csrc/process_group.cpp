// SPDX-License-Identifier: Apache-2.0
// ProcessGroupGradsync: argument checks on the caller's thread, the job queue, the worker
// and the Works (process_group.hpp says how the threads divide the work).
#include <Python.h>  // shutdown() lets go of the GIL while it joins the threads

#include "process_group.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include <c10/util/Exception.h>
#include <gradsync/core/error.hpp>

namespace gradsync_torch {

namespace {

// The live groups, so that Python's atexit can close them all before MPI ends. Weak: a
// group that Python dropped is gone, whatever this list says.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<c10::weak_intrusive_ptr<ProcessGroupGradsync>>& registry() {
  static std::vector<c10::weak_intrusive_ptr<ProcessGroupGradsync>> r;
  return r;
}

std::optional<gradsync::dtype> reduce_type(at::ScalarType s) {
  switch (s) {
    // clang-format off
    case at::kFloat: return gradsync::dtype::f32;
    case at::kDouble: return gradsync::dtype::f64;
    case at::kHalf: return gradsync::dtype::f16;  // bit-compatible with gradsync::half
    case at::kBFloat16: return gradsync::dtype::bf16;  // and with gradsync::bfloat16
    case at::kInt: return gradsync::dtype::i32;
    case at::kLong: return gradsync::dtype::i64;
    default: return std::nullopt;
      // clang-format on
  }
}

// What a broadcast or allgather moves: the element type when gradsync has it (its
// argument check then names it), else the bytes (bool, uint8, int8, int16, complex).
struct moved {
  void* data;
  std::size_t count;
  gradsync::dtype type;
};
moved moved_of(const at::Tensor& t) {
  if (auto d = reduce_type(t.scalar_type())) {
    return {t.data_ptr(), static_cast<std::size_t>(t.numel()), *d};
  }
  return {t.data_ptr(), static_cast<std::size_t>(t.nbytes()), gradsync::dtype::i8};
}

// An allgather of `m` (`bytes` a rank) into `out`. An input that overlaps `out` other
// than at this rank's block (in place) is copied first: gradsync refuses it (a peer's
// block would overwrite it before it is sent); torch lets a caller pass it.
void allgather_into(engine& e, const moved& m, std::size_t bytes, std::byte* out,
                    const gradsync::call_options& opt) {
  const auto* in = static_cast<const std::byte*>(m.data);
  if (bytes && in < out + e.size() * bytes && out < in + bytes && in != out + e.rank() * bytes) {
    const std::vector<std::byte> copy(in, in + bytes);
    e.allgather(copy.data(), out, m.count, m.type, opt);
    return;
  }
  e.allgather(m.data, out, m.count, m.type, opt);
}

// A reduce_scatter of `in` (size() blocks of `bytes`) into `out`. An output inside the
// input (torch passes one, NCCL reduces in place) gets the result through a copy:
// gradsync refuses overlapping spans.
void reduce_scatter_into(engine& e, const std::byte* in, std::byte* out, std::size_t bytes,
                         std::size_t count, gradsync::dtype type, gradsync::reduce_op op,
                         const gradsync::call_options& opt) {
  if (bytes && out < in + e.size() * bytes && in < out + bytes) {
    std::vector<std::byte> result(bytes);
    e.reduce_scatter(in, result.data(), count, type, op, opt);
    std::memcpy(out, result.data(), bytes);
    return;
  }
  e.reduce_scatter(in, out, count, type, op, opt);
}

void check_tensor(const at::Tensor& t, const char* call) {
  TORCH_CHECK(t.defined(), "gradsync: ", call, " got an undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "gradsync: ", call,
              " takes dense tensors, and this one is ", t.layout(),
              ": pass .to_dense(), or reduce a sparse tensor's indices and values yourself "
              "(e.g. allgather them)");
  TORCH_CHECK(t.device().is_cpu(), "gradsync: ", call, " takes CPU tensors, and this one is on ",
              t.device(), ": move it with .cpu() (GPU tensors need the 'nccl' backend)");
  TORCH_CHECK(t.is_contiguous(), "gradsync: ", call,
              " takes contiguous tensors: pass t.contiguous() (and copy the result back into "
              "t if you need it there)");
}

gradsync::dtype checked_reduce_type(const at::Tensor& t, const char* call) {
  const auto d = reduce_type(t.scalar_type());
  TORCH_CHECK(d.has_value(), "gradsync: ", call, " reduces float32, float64, float16, bfloat16, ",
              "int32 and int64 tensors, not ", t.scalar_type(),
              ": convert it first (e.g. .to(torch.int32) for bool or uint8)");
  return *d;
}

gradsync::reduce_op reduce_of(const c10d::ReduceOp& op, const char* call) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return gradsync::reduce_op::sum;
    case c10d::ReduceOp::AVG:  // integers: the sum divided, truncated toward zero
      return gradsync::reduce_op::avg;
    case c10d::ReduceOp::PRODUCT:
      return gradsync::reduce_op::prod;
    case c10d::ReduceOp::MIN:
      return gradsync::reduce_op::min;
    case c10d::ReduceOp::MAX:
      return gradsync::reduce_op::max;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(false, "gradsync: ", call,
                  " has no bitwise ops (BAND, BOR, BXOR): for flags use MIN (all) or MAX (any) "
                  "on an int32 tensor of 0 and 1; for bit masks all_gather the tensors and "
                  "combine them with torch.bitwise_and / bitwise_or / bitwise_xor");
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK(false, "gradsync: ", call,
                  " has no PREMUL_SUM: multiply the tensor by the factor first (t.mul_(f)), "
                  "then reduce with SUM");
    default:
      break;
  }
  TORCH_CHECK(false, "gradsync: ", call, " got an unknown reduce op (", int(op.op_), ")");
}

void check_one(const std::vector<at::Tensor>& v, const char* call) {
  TORCH_CHECK(v.size() == 1, "gradsync: ", call, " takes one tensor per call (got ", v.size(),
              "); for several use allreduce_coalesced, or one call each");
}

void check_like(const at::Tensor& t, const at::Tensor& ref, const char* call, const char* what) {
  check_tensor(t, call);
  TORCH_CHECK(t.scalar_type() == ref.scalar_type() && t.numel() == ref.numel(), "gradsync: ", call,
              ": every ", what, " must have the input's dtype and element count (",
              ref.scalar_type(), ", ", ref.numel(), "), and one has ", t.scalar_type(), ", ",
              t.numel());
}

std::size_t checked_root(std::int64_t root, int size, const char* call) {
  TORCH_CHECK(root >= 0 && root < size, "gradsync: ", call, " root ", root,
              " is not a rank of this group of ", size);
  return static_cast<std::size_t>(root);
}

// The list a rooted call (gather's outputs, scatter's inputs) takes on the root (one list
// of `size` tensors like `ref`) and on every other rank (none, as torch passes it).
void check_root_list(const std::vector<std::vector<at::Tensor>>& lists, bool root, int size,
                     const at::Tensor& ref, const char* call, const char* what) {
  if (!root) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "gradsync: ", call,
                " takes ", what, " on the root rank only; this rank is not the root");
    return;
  }
  TORCH_CHECK(lists.size() == 1 && lists[0].size() == static_cast<std::size_t>(size),
              "gradsync: ", call, " takes one list of ", size, " ", what,
              " on the root (one per rank)");
  for (const auto& t : lists[0]) check_like(t, ref, call, what);
}

// What to use for the calls the backend does not implement.
constexpr const char* on_gloo = "run it on a Gloo group (dist.new_group(backend=\"gloo\"))";
constexpr const char* p2p_on_gloo =
    "it has collectives only; point-to-point calls need a Gloo group "
    "(dist.new_group(backend=\"gloo\"))";

[[noreturn]] void not_implemented(const char* call, const char* instead) {
  TORCH_CHECK(false, "gradsync: the gradsync backend does not implement ", call, ": ", instead);
}

// One piece of a list-form call: where it lives and how many bytes.
struct piece {
  std::byte* data;
  std::size_t bytes;
};

// The pieces of `list`, and whether they already lie back to back in memory (then the
// call reads or writes them in place, without the packing copy).
std::pair<std::vector<piece>, bool> pieces_of(const std::vector<at::Tensor>& list) {
  std::vector<piece> p;
  bool adjacent = true;
  for (const auto& t : list) {
    p.push_back({static_cast<std::byte*>(t.data_ptr()), static_cast<std::size_t>(t.nbytes())});
    if (p.size() > 1)
      adjacent = adjacent && p[p.size() - 2].data + p[p.size() - 2].bytes == p.back().data;
  }
  return {std::move(p), adjacent};
}

}  // namespace

// ---- WorkGradsync ---------------------------------------------------------------------

WorkGradsync::WorkGradsync(int rank, c10d::OpType type, const char* title,
                           std::vector<at::Tensor> result, std::vector<at::Tensor> keep)
    : c10d::Work(rank, type, title),
      result_(std::move(result)),
      keep_(std::move(keep)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

WorkGradsync::~WorkGradsync() = default;

void WorkGradsync::complete(std::exception_ptr error) {
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(result_));
  }
  finish(error);
}

// ---- ProcessGroupGradsync -------------------------------------------------------------

ProcessGroupGradsync::ProcessGroupGradsync(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                           int size, std::chrono::milliseconds timeout)
    : backend_base(rank, size) {
  TORCH_CHECK(rank >= 0 && size > 0 && rank < size, "gradsync: rank ", rank,
              " is not in a group of ", size);
  call_.timeout = gradsync::seconds_d(static_cast<double>(timeout.count()) / 1000.0);
  kv_store kv;
  kv.set = [store](const std::string& k, const std::string& v) {
    store->set(k, std::vector<std::uint8_t>(v.begin(), v.end()));
  };
  kv.get = [store](const std::string& k) {
    const auto b = store->get(k);
    return std::string(b.begin(), b.end());
  };
  kv.add = [store](const std::string& k, std::int64_t d) { return store->add(k, d); };
  engine_ = open_engine(static_cast<std::size_t>(rank), static_cast<std::size_t>(size),
                        call_.timeout, kv);
  init();
  worker_ = std::thread([this] { loop(); });
}

ProcessGroupGradsync::~ProcessGroupGradsync() {
  shutdown();
}

c10::intrusive_ptr<ProcessGroupGradsync> ProcessGroupGradsync::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  auto pg = c10::make_intrusive<ProcessGroupGradsync>(store, rank, size, timeout);
  std::lock_guard lk(registry_mutex());
  auto& r = registry();
  r.erase(std::remove_if(r.begin(), r.end(), [](const auto& w) { return w.expired(); }), r.end());
  r.emplace_back(pg);
  return pg;
}

void ProcessGroupGradsync::shutdown_all() {
  std::vector<c10::intrusive_ptr<ProcessGroupGradsync>> live;
  {
    std::lock_guard lk(registry_mutex());
    for (auto& w : registry()) {
      if (auto p = w.lock()) live.push_back(std::move(p));
    }
    registry().clear();
  }
  for (auto& p : live) p->shutdown();
}

void ProcessGroupGradsync::shutdown() {
  // The pool's threads may be waiting for the GIL to run a callback: joining them while
  // holding it would never end.
  PyThreadState* saved = nullptr;
  if (Py_IsInitialized() && PyGILState_Check()) saved = PyEval_SaveThread();
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    // After a timeout or a lost peer the queued calls cannot succeed: make them fail now.
    if (failed_ && engine_) engine_->abort();
  }
  cv_.notify_all();
  if (worker_.joinable()) {
    if (worker_.get_id() == std::this_thread::get_id()) {
      worker_.detach();  // cannot happen (the worker holds no references); kept safe
    } else {
      worker_.join();
    }
  }
  completions_.stop();
  engine_.reset();
  if (saved) PyEval_RestoreThread(saved);
}

std::string ProcessGroupGradsync::transport() const {
  return engine_ ? std::string(engine_->transport()) : std::string("closed");
}
std::string ProcessGroupGradsync::describe() const {
  return engine_ ? engine_->describe() : std::string("closed");
}

gradsync::call_options ProcessGroupGradsync::options(std::chrono::milliseconds t) const {
  gradsync::call_options o = call_;
  if (t.count() > 0) o.timeout = gradsync::seconds_d(static_cast<double>(t.count()) / 1000.0);
  return o;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::enqueue(c10d::OpType type, const char* title,
                                                             std::vector<at::Tensor> result,
                                                             std::vector<at::Tensor> keep,
                                                             std::function<void(engine&)> run) {
  auto work =
      c10::make_intrusive<WorkGradsync>(getRank(), type, title, std::move(result), std::move(keep));
  {
    std::lock_guard lk(mu_);
    TORCH_CHECK(!stopping_,
                "gradsync: this process group is shut down (destroy_process_group or the "
                "interpreter's exit); make a new one with new_group or init_process_group");
    queue_.push_back({work, std::move(run)});
  }
  cv_.notify_one();
  return work;
}

void ProcessGroupGradsync::loop() {
  for (;;) {
    job j;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      j = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr err;
    try {
      j.run(*engine_);
    } catch (const gradsync::error& e) {
      err = std::current_exception();
      const auto c = e.code();
      if (c != gradsync::errc::mismatch && c != gradsync::errc::invalid_argument &&
          c != gradsync::errc::non_finite) {
        note_failure();  // the transport is unusable; MPI is left to the launcher
        std::lock_guard lk(mu_);
        failed_ = true;
      }
    } catch (...) {
      err = std::current_exception();
    }
    j.run = nullptr;
    // The Work's last reference may go on the pool's thread (it may take the GIL), never
    // here: moved, not copied.
    completions_.post([w = std::move(j.work), err]() mutable {
      w->complete(err);
      w.reset();
    });
  }
}

// ---- the collectives ------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  check_one(tensors, "broadcast");
  check_tensor(tensors[0], "broadcast");
  const std::size_t root = checked_root(opts.rootRank, getSize(), "broadcast");
  TORCH_CHECK(opts.rootTensor == 0, "gradsync: broadcast takes one tensor (rootTensor 0)");
  const moved m = moved_of(tensors[0]);
  return enqueue(c10d::OpType::BROADCAST, "gradsync:broadcast", tensors, {},
                 [m, root, opt = options(opts.timeout)](engine& e) {
                   e.broadcast(m.data, m.count, m.type, root, opt);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  check_one(tensors, "allreduce");
  const at::Tensor& t = tensors[0];
  check_tensor(t, "allreduce");
  const gradsync::dtype type = checked_reduce_type(t, "allreduce");
  const gradsync::reduce_op op = reduce_of(opts.reduceOp, "allreduce");
  void* data = t.data_ptr();
  const auto count = static_cast<std::size_t>(t.numel());
  return enqueue(c10d::OpType::ALLREDUCE, "gradsync:all_reduce", tensors, {},
                 [data, count, type, op, opt = options(opts.timeout)](engine& e) {
                   e.allreduce(data, count, type, op, opt);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "gradsync: allreduce_coalesced got no tensors");
  for (const auto& t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "gradsync: allreduce_coalesced takes tensors of one dtype (got ",
                tensors[0].scalar_type(), " and ", t.scalar_type(), "); make one call per dtype");
  }
  const gradsync::dtype type = checked_reduce_type(tensors[0], "allreduce_coalesced");
  const gradsync::reduce_op op = reduce_of(opts.reduceOp, "allreduce_coalesced");
  auto [parts, adjacent] = pieces_of(tensors);
  std::size_t bytes = 0;
  for (const auto& p : parts) bytes += p.bytes;
  const std::size_t count = bytes / tensors[0].element_size();
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "gradsync:all_reduce_coalesced", tensors, {},
                 [this, parts = std::move(parts), adjacent = adjacent, bytes, count, type, op,
                  opt = options(opts.timeout)](engine& e) {
                   if (adjacent) {  // one allreduce over all of them, in place
                     e.allreduce(parts[0].data, count, type, op, opt);
                     return;
                   }
                   scratch_.resize(bytes);
                   std::size_t at = 0;
                   for (const auto& p : parts) {
                     if (p.bytes) std::memcpy(scratch_.data() + at, p.data, p.bytes);
                     at += p.bytes;
                   }
                   e.allreduce(scratch_.data(), count, type, op, opt);
                   at = 0;
                   for (const auto& p : parts) {
                     if (p.bytes) std::memcpy(p.data, scratch_.data() + at, p.bytes);
                     at += p.bytes;
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  check_one(inputs, "allgather");
  const at::Tensor& in = inputs[0];
  check_tensor(in, "allgather");
  TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<std::size_t>(getSize()),
              "gradsync: allgather takes one list of ", getSize(),
              " output tensors (one per rank)");
  for (const auto& o : outputs[0]) check_like(o, in, "allgather", "output tensor");
  const moved m = moved_of(in);
  auto [parts, adjacent] = pieces_of(outputs[0]);
  const std::size_t bytes = static_cast<std::size_t>(in.nbytes());
  return enqueue(c10d::OpType::ALLGATHER, "gradsync:all_gather", outputs[0], inputs,
                 [this, m, parts = std::move(parts), adjacent = adjacent, bytes,
                  opt = options(opts.timeout)](engine& e) {
                   if (adjacent) {  // the outputs are one buffer already
                     allgather_into(e, m, bytes, parts[0].data, opt);
                     return;
                   }
                   scratch_.resize(bytes * parts.size());
                   e.allgather(m.data, scratch_.data(), m.count, m.type, opt);
                   for (std::size_t q = 0; q < parts.size(); ++q) {
                     if (bytes) std::memcpy(parts[q].data, scratch_.data() + q * bytes, bytes);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  check_tensor(input, "_allgather_base");
  check_tensor(output, "_allgather_base");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * getSize(),
      "gradsync: _allgather_base (all_gather_into_tensor) needs an output of the input's "
      "dtype with ",
      getSize(), " times its elements (", input.numel() * getSize(), "); it has ",
      output.scalar_type(), ", ", output.numel());
  const moved m = moved_of(input);
  auto* out = static_cast<std::byte*>(output.data_ptr());
  const auto bytes = static_cast<std::size_t>(input.nbytes());
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "gradsync:_all_gather_base", {output}, {input},
                 [m, out, bytes, opt = options(opts.timeout)](engine& e) {
                   allgather_into(e, m, bytes, out, opt);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_one(outputs, "reduce_scatter");
  const at::Tensor& out = outputs[0];
  check_tensor(out, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(getSize()),
              "gradsync: reduce_scatter takes one list of ", getSize(),
              " input tensors (one per rank)");
  for (const auto& i : inputs[0]) check_like(i, out, "reduce_scatter", "input tensor");
  const gradsync::dtype type = checked_reduce_type(out, "reduce_scatter");
  const gradsync::reduce_op op = reduce_of(opts.reduceOp, "reduce_scatter");
  auto [parts, adjacent] = pieces_of(inputs[0]);
  auto* dst = static_cast<std::byte*>(out.data_ptr());
  const auto count = static_cast<std::size_t>(out.numel());
  const std::size_t bytes = static_cast<std::size_t>(out.nbytes());
  return enqueue(c10d::OpType::REDUCE_SCATTER, "gradsync:reduce_scatter", outputs, inputs[0],
                 [this, parts = std::move(parts), adjacent = adjacent, dst, count, bytes, type, op,
                  opt = options(opts.timeout)](engine& e) {
                   const std::byte* src = parts[0].data;
                   if (!adjacent) {
                     scratch_.resize(bytes * parts.size());
                     for (std::size_t q = 0; q < parts.size(); ++q) {
                       if (bytes) std::memcpy(scratch_.data() + q * bytes, parts[q].data, bytes);
                     }
                     src = scratch_.data();
                   }
                   reduce_scatter_into(e, src, dst, bytes, count, type, op, opt);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "_reduce_scatter_base");
  check_tensor(output, "_reduce_scatter_base");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * getSize(),
      "gradsync: _reduce_scatter_base (reduce_scatter_tensor) needs an input of the "
      "output's dtype with ",
      getSize(), " times its elements (", output.numel() * getSize(), "); it has ",
      input.scalar_type(), ", ", input.numel());
  const gradsync::dtype type = checked_reduce_type(output, "_reduce_scatter_base");
  const gradsync::reduce_op op = reduce_of(opts.reduceOp, "_reduce_scatter_base");
  const auto* src = static_cast<const std::byte*>(input.data_ptr());
  auto* dst = static_cast<std::byte*>(output.data_ptr());
  const auto count = static_cast<std::size_t>(output.numel());
  const auto bytes = static_cast<std::size_t>(output.nbytes());
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "gradsync:_reduce_scatter_base", {output},
                 {input},
                 [src, dst, bytes, count, type, op, opt = options(opts.timeout)](engine& e) {
                   reduce_scatter_into(e, src, dst, bytes, count, type, op, opt);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::barrier(const c10d::BarrierOptions& opts) {
  // A one-element allreduce: no rank leaves before every rank has arrived.
  return enqueue(c10d::OpType::BARRIER, "gradsync:barrier", {}, {},
                 [opt = options(opts.timeout)](engine& e) {
                   std::int32_t one = 1;
                   e.allreduce(&one, 1, gradsync::dtype::i32, gradsync::reduce_op::sum, opt);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  check_one(tensors, "reduce");
  const at::Tensor& t = tensors[0];
  check_tensor(t, "reduce");
  const std::size_t root = checked_root(opts.rootRank, getSize(), "reduce");
  TORCH_CHECK(opts.rootTensor == 0, "gradsync: reduce takes one tensor (rootTensor 0)");
  const gradsync::dtype type = checked_reduce_type(t, "reduce");
  const gradsync::reduce_op op = reduce_of(opts.reduceOp, "reduce");
  void* data = t.data_ptr();
  const auto count = static_cast<std::size_t>(t.numel());
  const auto bytes = static_cast<std::size_t>(t.nbytes());
  const bool mine = root == static_cast<std::size_t>(getRank());
  // An allreduce: the root's tensor in place, the others' on a copy, so that only the
  // root's changes.
  return enqueue(
      c10d::OpType::REDUCE, "gradsync:reduce", tensors, {},
      [this, data, count, bytes, type, op, mine, opt = options(opts.timeout)](engine& e) {
        if (mine) {
          e.allreduce(data, count, type, op, opt);
          return;
        }
        scratch_.resize(bytes);
        if (bytes) std::memcpy(scratch_.data(), data, bytes);
        e.allreduce(scratch_.data(), count, type, op, opt);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  check_one(inputs, "gather");
  const at::Tensor& in = inputs[0];
  check_tensor(in, "gather");
  const std::size_t root = checked_root(opts.rootRank, getSize(), "gather");
  const bool mine = root == static_cast<std::size_t>(getRank());
  check_root_list(outputs, mine, getSize(), in, "gather", "output tensors");
  const moved m = moved_of(in);
  std::vector<at::Tensor> result = mine ? outputs[0] : std::vector<at::Tensor>{};
  auto [parts, adjacent] = pieces_of(result);
  const auto bytes = static_cast<std::size_t>(in.nbytes());
  // An allgather that only the root keeps.
  return enqueue(c10d::OpType::GATHER, "gradsync:gather", result, inputs,
                 [this, m, parts = std::move(parts), adjacent = adjacent, bytes, mine,
                  n = static_cast<std::size_t>(getSize()), opt = options(opts.timeout)](engine& e) {
                   if (mine && adjacent) {  // the outputs are one buffer already
                     allgather_into(e, m, bytes, parts[0].data, opt);
                     return;
                   }
                   scratch_.resize(bytes * n);
                   e.allgather(m.data, scratch_.data(), m.count, m.type, opt);
                   for (std::size_t q = 0; q < parts.size(); ++q) {
                     if (bytes) std::memcpy(parts[q].data, scratch_.data() + q * bytes, bytes);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  check_one(outputs, "scatter");
  const at::Tensor& out = outputs[0];
  check_tensor(out, "scatter");
  const std::size_t root = checked_root(opts.rootRank, getSize(), "scatter");
  const bool mine = root == static_cast<std::size_t>(getRank());
  check_root_list(inputs, mine, getSize(), out, "scatter", "input tensors");
  const moved m = moved_of(out);
  std::vector<at::Tensor> sent = mine ? inputs[0] : std::vector<at::Tensor>{};
  std::vector<piece> parts = pieces_of(sent).first;
  const auto bytes = static_cast<std::size_t>(out.nbytes());
  // A broadcast of the root's whole list, of which each rank keeps its own piece.
  return enqueue(
      c10d::OpType::SCATTER, "gradsync:scatter", outputs, sent,
      [this, m, parts = std::move(parts), bytes, root, n = static_cast<std::size_t>(getSize()),
       me = static_cast<std::size_t>(getRank()), opt = options(opts.timeout)](engine& e) {
        scratch_.resize(bytes * n);
        for (std::size_t q = 0; q < parts.size(); ++q) {
          if (bytes) std::memcpy(scratch_.data() + q * bytes, parts[q].data, bytes);
        }
        e.broadcast(scratch_.data(), m.count * n, m.type, root, opt);
        if (bytes) std::memcpy(m.data, scratch_.data() + me * bytes, bytes);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::alltoall_base(at::Tensor&, at::Tensor&,
                                                                   std::vector<std::int64_t>&,
                                                                   std::vector<std::int64_t>&,
                                                                   const c10d::AllToAllOptions&) {
  not_implemented("all_to_all_single", on_gloo);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::alltoall(std::vector<at::Tensor>&,
                                                              std::vector<at::Tensor>&,
                                                              const c10d::AllToAllOptions&) {
  not_implemented("all_to_all", on_gloo);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
    const c10d::AllgatherOptions&) {
  not_implemented("all_gather_coalesced",
                  "make one all_gather call per tensor, or gather one flat tensor with "
                  "all_gather_into_tensor");
}
c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::send(std::vector<at::Tensor>&, int, int) {
  not_implemented("send", p2p_on_gloo);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::recv(std::vector<at::Tensor>&, int, int) {
  not_implemented("recv", p2p_on_gloo);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::recvAnysource(std::vector<at::Tensor>&, int) {
  not_implemented("recv", p2p_on_gloo);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGradsync::compressed_average(
    at::Tensor& bucket, codec c, std::size_t index, std::vector<std::size_t> tensors) {
  check_tensor(bucket, "the comm hook");
  const gradsync::dtype type = checked_reduce_type(bucket, "the comm hook");
  void* data = bucket.data_ptr();
  const auto count = static_cast<std::size_t>(bucket.numel());
  std::size_t listed = 0;
  for (std::size_t n : tensors) listed += n;
  TORCH_CHECK(tensors.empty() || listed == count,
              "gradsync: the comm hook's tensor sizes add up to ", listed,
              " elements and the bucket holds ", count);
  return enqueue(
      c10d::OpType::ALLREDUCE, "gradsync:compressed_average", {bucket}, {},
      [data, count, type, c, index, tensors = std::move(tensors), opt = call_](engine& e) {
        e.compressed_average(index, data, count, type, c, tensors, opt);
      });
}

}  // namespace gradsync_torch
