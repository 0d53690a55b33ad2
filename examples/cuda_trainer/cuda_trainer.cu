// SPDX-License-Identifier: Apache-2.0
// cuda_trainer: the mini-trainer's MLP on Fashion-MNIST with weights, activations and
// gradients in device memory, gradients averaged by gradsync on the GPU.
//   build/examples/cuda_trainer/cuda_trainer --ranks 2 --epochs 2        (cuda_ipc: forked
//       processes sharing the GPUs of this host, rank r on GPU r % count)
//   mpirun -n 2 build/examples/cuda_trainer/cuda_trainer --transport mpi_device
// Same flags, progress lines and final line as examples/mini_trainer; --exact-grads gives
// the CPU trainer's weights_fnv64 (exact_math.hpp). Without a usable GPU it says why and
// exits 77. What the CPU trainer has and this one does not (checkpoints, compression, the
// sharded optimizer) is refused with a message, never ignored.
//
// Fusion: the gradients are one contiguous device arena in layer order, so a bucket is a
// run of whole layers of it: --fusion bucket allreduces each run in place (no packing) as
// soon as backward has enqueued its last layer; --fusion none one call per tensor after
// backward. Everything runs on the transport's stream in order, so the calls do not
// overlap the rest of backward yet (docs/cuda.md).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gradsync/algo/native.hpp>
#include <gradsync/config.hpp>
#include <gradsync/allreduce.hpp>
#include <gradsync/core/cuda_check.hpp>
#include <gradsync/testing/exact_inputs.hpp>
#include <gradsync/transport/cuda_ipc.hpp>
#include <gradsync/transport/cuda_ipc/fork.hpp>

#ifdef CUDA_TRAINER_MPI
#include <mpi.h>

#include <gradsync/transport/mpi.hpp>
#include <gradsync/transport/mpi/exit.hpp>
#include <gradsync/transport/mpi_device.hpp>
#endif

#include "../mini_trainer/config.hpp"
#include "../mini_trainer/data.hpp"
#include "../mini_trainer/report.hpp"
#include "../mini_trainer/rng.hpp"
#include "../mini_trainer/shape.hpp"
#include "device_mlp.cuh"

namespace gs = gradsync;
namespace mt = mini_trainer;

namespace cuda_trainer {

std::string usage() {
  return "usage: cuda_trainer [flags]\n"
         "  --transport cuda_ipc|mpi_device   cuda_ipc: --ranks N forked processes on this\n"
         "                              host's GPUs (default); mpi_device: one rank per mpirun\n"
         "                              process (builds with MPI only)\n"
         "  --algo native               the transport's own device allreduce (the only one)\n"
         "  --fusion none|bucket        one allreduce per tensor, or per run of layers (none)\n"
         "  --bucket-mb X               bucket size in MiB for --fusion bucket (1)\n"
         "  --ranks N                   processes for --transport cuda_ipc (1; at most 8)\n"
         "  --epochs N (2)  --batch N global batch (128)  --lr X (0.02)  --momentum X (0.9)\n"
         "  --seed N (1)    --hidden A,B hidden layer widths (256,128)\n"
         "  --data DIR                  Fashion-MNIST IDX .gz files\n"
         "                              (/usr/share/datasets/fashion-mnist)\n"
         "  --limit N                   use the first N training and test samples\n"
         "  --exact-grads               exactly summable gradients: the CPU trainer's bits\n"
         "  --progress-every N          steps between progress lines (100; 0 = off)\n"
         "  --quiet                     print only the final line\n"
         "  --help, --version           print this text, or the version, and exit 0\n"
         "test hooks: --print-grad-hash --stop-after STEPS --inject-divergence RANK --throttle-ms "
         "MS\n"
         "not here (the CPU mini_trainer has them): --compress, --shard-optimizer, --checkpoint,\n"
         "  --resume, --seed-per-rank, --node-ranks\n";
}

/// Refuses what the CPU trainer's parser accepts but this trainer does not do.
void validate(const mt::config& c) {
  auto refuse = [](const std::string& what) {
    throw mt::usage_error(what + " is not supported by cuda_trainer (the CPU mini_trainer has it)");
  };
  if (c.transport != "cuda_ipc" && c.transport != "mpi_device") {
    throw mt::usage_error("--transport must be cuda_ipc or mpi_device, got '" + c.transport + "'");
  }
  if (c.algo != "native") {
    throw mt::usage_error("--algo must be native (the transport's device allreduce), got '" +
                          c.algo + "'");
  }
  if (c.compress != "none") refuse("--compress " + c.compress);
  if (c.shard_optimizer) refuse("--shard-optimizer");
  if (!c.checkpoint_dir.empty() || c.resume) refuse("--checkpoint / --resume");
  if (c.seed_per_rank) refuse("--seed-per-rank");
  if (c.node_ranks) refuse("--node-ranks");
  if (c.transport == "cuda_ipc" && (c.ranks < 1 || c.ranks > gs::transport::cuda_ipc::max_ranks)) {
    throw mt::usage_error("--ranks must be 1.." +
                          std::to_string(gs::transport::cuda_ipc::max_ranks) +
                          " with cuda_ipc, got " + std::to_string(c.ranks));
  }
}

/// What every rank shares read-only.
struct run_context {
  const mt::config& cfg;
  const mt::dataset& train;
  const mt::dataset& test;
  const mt::mlp_shape& shape;
};

/// The host-side collectives besides the gradient allreduce (statistics, hashes): an
/// allgather of a few bytes over the bootstrap (fork_group) or MPI.
struct host_channel {
  std::size_t rank = 0, size = 1;
  std::function<void(const void*, void*, std::size_t)> allgather;

  /// Element-wise sum over ranks, added in rank order: the same bits everywhere.
  std::vector<double> sum(const std::vector<double>& x) const {
    std::vector<double> all(x.size() * size), s(x.size(), 0.0);
    allgather(x.data(), all.data(), x.size() * sizeof(double));
    for (std::size_t q = 0; q < size; ++q)
      for (std::size_t i = 0; i < x.size(); ++i) s[i] += all[q * x.size() + i];
    return s;
  }
  std::vector<std::uint64_t> gather(std::uint64_t mine) const {
    std::vector<std::uint64_t> all(size);
    allgather(&mine, all.data(), sizeof mine);
    return all;
  }
};

/// Page-locked host memory for asynchronous copies.
template <class T>
class pinned {
 public:
  explicit pinned(std::size_t n) {
    GRADSYNC_CUDA_CHECK(cudaMallocHost(&p_, std::max<std::size_t>(1, n) * sizeof(T)));
  }
  pinned(const pinned&) = delete;
  pinned& operator=(const pinned&) = delete;
  ~pinned() { cudaFreeHost(p_); }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

/// Runs the whole training on rank t.rank(); returns the final line (same on every rank).
template <class Tr>
std::string train_rank(Tr& t, const host_channel& host, const run_context& ctx,
                       const std::string& device_name) {
  using clk = std::chrono::steady_clock;
  const mt::config& cfg = ctx.cfg;
  const std::size_t n = t.size(), r = t.rank(), B = cfg.batch;
  const bool lead = r == 0 && !cfg.quiet;
  auto say = [&](const char* fmt, auto... a) {
    if (lead) {
      std::printf(fmt, a...);
      std::fflush(stdout);
    }
  };
  const std::size_t steps_per_epoch = mt::checked_steps_per_epoch(cfg, n, ctx.train.n);
  const cudaStream_t stream = t.stream();
  const std::size_t max_shard = (B + n - 1) / n, eval_chunk = 256, pixels = ctx.train.pixels;
  const std::size_t cap = std::max(max_shard, eval_chunk);
  device_mlp net(ctx.shape, cap, cfg.exact_grads, stream);
  const std::size_t P = net.param_count(), L = ctx.shape.layers();
  {
    std::vector<float> w0;
    mt::init_params(ctx.shape, cfg.seed, w0);  // every rank draws the same start
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(net.params(), w0.data(), P * sizeof(float),
                                        cudaMemcpyHostToDevice, stream));
    GRADSYNC_CUDA_CHECK(cudaMemsetAsync(net.momentum(), 0, P * sizeof(float), stream));
    t.synchronize(gs::deadline::after(gs::default_timeout()));
  }
  pinned<float> x(cap * pixels);
  pinned<std::uint8_t> y(cap);
  pinned<double> loss(cap);
  pinned<unsigned char> hit(cap);
  std::vector<float> host_params(P), host_grads(cfg.print_grad_hash ? P : 0);
  auto wait = [&] { t.synchronize(gs::deadline::after(gs::default_timeout())); };

  auto params_hash = [&] {
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(host_params.data(), net.params(), P * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream));
    wait();
    return gs::testing::fnv1a64(host_params.data(), P * sizeof(float));
  };
  auto replica_check = [&](const std::string& when) {
    const std::string why = mt::replica_mismatch(host.gather(params_hash()), when);
    if (!why.empty()) throw std::runtime_error(why);
  };
  // Gathers m samples into the pinned buffers and copies them to the device.
  auto load = [&](const mt::dataset& d, const std::uint32_t* idx, std::size_t m) {
    mt::gather_batch(d, idx, m, x.get(), y.get());
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(net.input(), x.get(), m * pixels * sizeof(float),
                                        cudaMemcpyHostToDevice, stream));
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(net.labels(), y.get(), m, cudaMemcpyHostToDevice, stream));
  };
  auto fetch_stats = [&](std::size_t m) {
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(loss.get(), net.losses(), m * sizeof(double),
                                        cudaMemcpyDeviceToHost, stream));
    GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(hit.get(), net.hits(), m, cudaMemcpyDeviceToHost, stream));
  };
  auto evaluate = [&] {
    const std::size_t N = ctx.test.n, lo = r * N / n, hi = (r + 1) * N / n;
    std::vector<std::uint32_t> idx(eval_chunk);
    double correct = 0;
    for (std::size_t s = lo; s < hi; s += eval_chunk) {
      const std::size_t m = std::min(eval_chunk, hi - s);
      for (std::size_t i = 0; i < m; ++i) idx[i] = static_cast<std::uint32_t>(s + i);
      load(ctx.test, idx.data(), m);
      net.forward(m);
      fetch_stats(m);
      wait();
      for (std::size_t i = 0; i < m; ++i) correct += hit.get()[i];
    }
    return host.sum({correct})[0] / static_cast<double>(N);
  };

  // Buckets: runs of whole layers from the last one down, each at least --bucket-mb
  // (the last run whatever is left); closes[l] = the run that layer l completes, or -1.
  const bool fused = cfg.fusion == "bucket";
  const std::size_t cap_bytes = static_cast<std::size_t>(std::llround(cfg.bucket_mb * 1024 * 1024));
  std::vector<long> closes(L, -1);
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // [offset, count) in the arena
  if (fused) {
    std::size_t hi = L;  // the run covers layers [l, hi)
    for (std::size_t l = L; l-- > 0;) {
      const std::size_t bytes =
          (ctx.shape.weight_offset(hi) - ctx.shape.weight_offset(l)) * sizeof(float);
      if (bytes >= cap_bytes || l == 0) {
        closes[l] = static_cast<long>(runs.size());
        runs.emplace_back(ctx.shape.weight_offset(l),
                          ctx.shape.weight_offset(hi) - ctx.shape.weight_offset(l));
        hi = l;
      }
    }
  }
  auto allreduce = [&](std::size_t off, std::size_t count) {
    gs::allreduce<gs::algo::native>(t, gs::device_span<float>(net.grads() + off, count),
                                    gs::op::avg);
  };
  cudaEvent_t sync_begin = nullptr, sync_end = nullptr;
  GRADSYNC_CUDA_CHECK(cudaEventCreate(&sync_begin));
  GRADSYNC_CUDA_CHECK(cudaEventCreate(&sync_end));

  say("cuda_trainer: model %s (%zu parameters), %zu ranks, transport %s on %s, algo native, "
      "fusion %s (%zu calls/step), global batch %zu (%zu per rank), lr %g, momentum %g, %zu "
      "train / %zu test samples%s\n",
      ctx.shape.str().c_str(), P, n, std::string(Tr::name).c_str(), device_name.c_str(),
      cfg.fusion.c_str(), fused ? runs.size() : 2 * L, B, max_shard, double(cfg.lr),
      double(cfg.momentum), ctx.train.n, ctx.test.n, cfg.exact_grads ? ", exact grads" : "");
  replica_check("at start");

  double run_loss = 0, run_correct = 0, run_seen = 0, last_loss = -1, last_acc = -1;
  double mine_loss = 0, mine_correct = 0, mine_seen = 0;
  auto reduce_stats = [&] {
    const std::vector<double> s = host.sum({mine_loss, mine_correct, mine_seen});
    run_loss += s[0], run_correct += s[1], run_seen += s[2];
    mine_loss = mine_correct = mine_seen = 0;
  };
  std::vector<std::uint32_t> shard_idx(max_shard);
  mt::rng order(cfg.seed);
  std::size_t global_step = 0, epochs_done = 0;
  bool stopped = false;
  for (std::size_t epoch = 0; epoch < cfg.epochs && !stopped; ++epoch) {
    const std::vector<std::uint32_t> perm = order.permutation(ctx.train.n);
    double step_s = 0, sync_s = 0, win_step = 0, win_sync = 0;
    std::size_t win_steps = 0;
    const auto epoch_t0 = clk::now();
    auto win_t0 = epoch_t0;
    for (std::size_t s = 0; s < steps_per_epoch; ++s) {
      const auto t0 = clk::now();
      const std::size_t lo = r * B / n, hi = (r + 1) * B / n, m = hi - lo;
      for (std::size_t i = 0; i < m; ++i) shard_idx[i] = perm[s * B + lo + i];
      load(ctx.train, shard_idx.data(), m);
      net.forward(m);
      bool began = false;
      net.backward(m, static_cast<float>(double(n) / double(B)), [&](std::size_t l) {
        if (!fused || closes[l] < 0) return;
        if (!began) GRADSYNC_CUDA_CHECK(cudaEventRecord(sync_begin, stream)), began = true;
        allreduce(runs[closes[l]].first, runs[closes[l]].second);
      });
      if (!fused) {
        GRADSYNC_CUDA_CHECK(cudaEventRecord(sync_begin, stream));
        for (std::size_t l = L; l-- > 0;) {
          allreduce(ctx.shape.weight_offset(l), ctx.shape.dims[l + 1] * ctx.shape.dims[l]);
          allreduce(ctx.shape.bias_offset(l), ctx.shape.dims[l + 1]);
        }
      }
      GRADSYNC_CUDA_CHECK(cudaEventRecord(sync_end, stream));
      if (cfg.print_grad_hash) {
        GRADSYNC_CUDA_CHECK(cudaMemcpyAsync(host_grads.data(), net.grads(), P * sizeof(float),
                                            cudaMemcpyDeviceToHost, stream));
      }
      net.update(cfg.lr, cfg.momentum);
      fetch_stats(m);
      wait();
      float sync_ms = 0;
      GRADSYNC_CUDA_CHECK(cudaEventElapsedTime(&sync_ms, sync_begin, sync_end));
      for (std::size_t i = 0; i < m; ++i) mine_loss += loss.get()[i], mine_correct += hit.get()[i];
      mine_seen += double(m);
      const double dt = std::chrono::duration<double>(clk::now() - t0).count(), ds = sync_ms / 1e3;
      step_s += dt, sync_s += ds, win_step += dt, win_sync += ds, ++win_steps;
      ++global_step;
      if (cfg.print_grad_hash && r == 0) {
        mt::print_grad_hash(global_step,
                            gs::testing::fnv1a64(host_grads.data(), P * sizeof(float)));
      }
      const bool progress =
          cfg.progress_every && (s + 1) % cfg.progress_every == 0 && s + 1 < steps_per_epoch;
      if (progress) {
        reduce_stats();
        const double wall = std::chrono::duration<double>(clk::now() - win_t0).count();
        say("  epoch %zu step %5zu/%zu  loss %.4f  train_acc %.4f  %8.0f samples/s  sync %.1f "
            "ms/step (%.0f%% of step)\n",
            epoch + 1, s + 1, steps_per_epoch, run_loss / run_seen, run_correct / run_seen,
            double(win_steps * B) / wall, 1e3 * win_sync / double(win_steps),
            100.0 * win_sync / win_step);
        win_t0 = clk::now(), win_step = win_sync = 0, win_steps = 0;
      }
      if (cfg.throttle_ms) std::this_thread::sleep_for(std::chrono::milliseconds(cfg.throttle_ms));
      if (cfg.stop_after && global_step >= cfg.stop_after) {
        stopped = true;
        break;
      }
    }
    if (stopped) break;
    reduce_stats();
    const double train_s = std::chrono::duration<double>(clk::now() - epoch_t0).count();
    if (cfg.inject_divergence == static_cast<long>(r)) {
      float w0 = 0;
      GRADSYNC_CUDA_CHECK(cudaMemcpy(&w0, net.params(), sizeof w0, cudaMemcpyDeviceToHost));
      w0 += 1e-3f;
      GRADSYNC_CUDA_CHECK(cudaMemcpy(net.params(), &w0, sizeof w0, cudaMemcpyHostToDevice));
    }
    replica_check("after epoch " + std::to_string(epoch + 1));
    last_acc = evaluate();
    last_loss = run_loss / run_seen;
    say("epoch %zu/%zu  loss %.4f  train_acc %.4f  test_acc %.4f  %.0f samples/s  sync %.1f%% of "
        "step time (%.2f s of %.2f s)  replicas identical\n",
        epoch + 1, cfg.epochs, last_loss, run_correct / run_seen, last_acc,
        double(steps_per_epoch * B) / train_s, step_s > 0 ? 100.0 * sync_s / step_s : 0.0, sync_s,
        step_s);
    epochs_done = epoch + 1;
    run_loss = run_correct = run_seen = 0;
  }
  if (stopped) {
    replica_check("at --stop-after");
    say("stopped after global step %zu (--stop-after)\n", global_step);
  }
  cudaEventDestroy(sync_begin);
  cudaEventDestroy(sync_end);
  return mt::final_line(epochs_done, last_acc, last_loss, params_hash());
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "GPU " + std::to_string(device);
  return "GPU " + std::to_string(device) + " (" + p.name + ")";
}

/// Reports an error on one rank: usage errors (the same on every rank) once, by rank 0.
int report(std::size_t rank, const std::exception& e, bool usage) {
  if (!usage || rank == 0) {
    std::fprintf(stderr, "cuda_trainer: error: %s%s\n",
                 usage ? "" : ("rank " + std::to_string(rank) + ": ").c_str(), e.what());
  }
  return usage ? 2 : 1;
}

/// --transport cuda_ipc: --ranks forked processes; rank r on GPU r % count.
int run_cuda_ipc(const run_context& ctx) {
  const int rc = gs::transport::fork_group::run_forked(
      ctx.cfg.ranks, [&](gs::transport::fork_group& g) -> int {
        try {
          if (const std::string why = gs::cuda::unusable_reason(); !why.empty()) {
            if (g.rank() == 0)
              std::printf("cuda_trainer: no usable GPU (%s): skipped\n", why.c_str());
            return 77;
          }
          int count = 1;
          GRADSYNC_CUDA_CHECK(cudaGetDeviceCount(&count));
          const int device = static_cast<int>(g.rank() % static_cast<std::size_t>(count));
          gs::transport::cuda_ipc t{g, device};
          host_channel host{g.rank(), g.size(),
                            [&](const void* mine, void* all, std::size_t bytes) {
                              g.allgather(mine, all, bytes);
                            }};
          const std::string line = train_rank(t, host, ctx, device_name(device));
          if (g.rank() == 0) {
            if (!ctx.cfg.quiet && g.size() > 1) {
              std::printf("all %zu ranks hold identical weights\n", g.size());
            }
            std::printf("%s\n", line.c_str());
            std::fflush(stdout);
          }
          return 0;
        } catch (const mt::usage_error& e) {
          return report(g.rank(), e, true);
        } catch (const std::exception& e) {
          return report(g.rank(), e, false);
        }
      });
  return rc;
}

#ifdef CUDA_TRAINER_MPI
/// --transport mpi_device under mpirun: rank r on GPU (its rank inside the host) % count.
int run_mpi_device(const run_context& ctx) {
  gs::transport::mpi host_t{MPI_COMM_WORLD};
  if (const std::string why = gs::cuda::unusable_reason(); !why.empty()) {
    if (host_t.rank() == 0) std::printf("cuda_trainer: no usable GPU (%s): skipped\n", why.c_str());
    return 77;
  }
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, count = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  GRADSYNC_CUDA_CHECK(cudaGetDeviceCount(&count));
  const int device = local % count;
  gs::transport::mpi_device t{host_t, device};
  host_channel host{host_t.rank(), host_t.size(),
                    [](const void* mine, void* all, std::size_t bytes) {
                      MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all,
                                    static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
                    }};
  mt::config cfg = ctx.cfg;
  cfg.ranks = host_t.size();
  const run_context c{cfg, ctx.train, ctx.test, ctx.shape};
  const std::string line = train_rank(t, host, c, device_name(device));
  std::printf("%s\n", line.c_str());  // every rank: they must be identical
  std::fflush(stdout);
  return 0;
}
#endif

}  // namespace cuda_trainer

int main(int argc, char** argv) {
  namespace ct = cuda_trainer;
  mt::config defaults;
  defaults.transport = "cuda_ipc";
  defaults.algo = "native";
  int rc = 0;
  try {
    const mt::config cfg = mt::parse_args(argc, argv, defaults, ct::usage);
    if (cfg.help) {
      std::fputs(ct::usage().c_str(), stdout);
      return 0;
    }
    if (cfg.version) {
      std::printf("cuda_trainer (gradsync %s)\n", GRADSYNC_VERSION_STRING);
      return 0;
    }
    ct::validate(cfg);
    mt::mlp_shape shape;
    shape.dims.push_back(784);
    for (auto h : cfg.hidden) shape.dims.push_back(h);
    shape.dims.push_back(10);
    // Loaded before fork(): the processes share the pages (and the parent never touches
    // CUDA, whose context would not survive fork).
    const mt::dataset train = mt::load_split(cfg.data_dir, "train", cfg.limit);
    const mt::dataset test = mt::load_split(cfg.data_dir, "t10k", cfg.limit);
    const ct::run_context ctx{cfg, train, test, shape};
    if (cfg.transport == "cuda_ipc") return ct::run_cuda_ipc(ctx);
#ifdef CUDA_TRAINER_MPI
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    try {
      rc = ct::run_mpi_device(ctx);
    } catch (const mt::usage_error& e) {
      int me = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
      gs::transport::abort_job(MPI_COMM_WORLD, ct::report(static_cast<std::size_t>(me), e, true));
    } catch (const std::exception& e) {
      int me = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
      // One rank failing alone must not leave the others waiting.
      gs::transport::abort_job(MPI_COMM_WORLD, ct::report(static_cast<std::size_t>(me), e, false));
    }
    return gs::transport::finalize_job(rc);
#else
    throw mt::usage_error(
        "--transport mpi_device: this cuda_trainer was built without MPI (meson builds it with "
        "the first MPI flavour found)");
#endif
  } catch (const mt::usage_error& e) {
    std::fprintf(stderr, "cuda_trainer: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_trainer: error: %s\n", e.what());
    return 1;
  }
  return rc;
}
