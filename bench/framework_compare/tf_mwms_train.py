# SPDX-License-Identifier: Apache-2.0
"""TensorFlow's MultiWorkerMirroredStrategy on examples/torch_trainer's CNN, written in Keras:
conv(1->16, 5x5, same) - relu - pool - conv(16->32, 5x5, same) - relu - pool - fc(1568->128)
- relu - fc(128->10) (215,370 parameters, as the torch model), initialised as torch
initialises Conv2d and Linear (weights uniform in +-1/sqrt(fan_in), which is Keras's
VarianceScaling(1/3, fan_in, uniform); biases uniform in +-1/sqrt(fan_in)), trained with
SGD lr 0.02 momentum 0.9 on Fashion-MNIST (Debian's gzip IDX files), with the trainers'
normalisation and sample order (bench/torch_backend/trainer_data.py).
Reports samples/s (global samples per second over the timed steps, rank 0's clock: every
step ends in a cross-worker reduction of the loss, so the workers run in lock step) and the
test accuracy on the first --test-limit test images.

The global batch is --global-batch (default 64, torch_trainer's; each worker takes
global/workers). ddp_bench.py and horovod_train.py take a per-rank batch (64): to compare with
them at N ranks pass --global-batch 64*N.

The all-reduce is the strategy's RING implementation (collective ops over gRPC) with
CommunicationOptions(bytes_per_pack=--bytes-per-pack) (0: TensorFlow decides).

Launch:
  one host, N workers (this script starts them):  V/bin/python tf_mwms_train.py --workers 2
  under Open MPI's mpirun (rank and size from OMPI_COMM_WORLD_*), e.g. on simulated hosts:
    scripts/vcluster run --mpi openmpi --hosts 2 --ppn 1 --rate 1gbit -- env V/bin/python \\
      tf_mwms_train.py --worker-hosts 198.18.0.11,198.18.0.12
  TF_CONFIG names one gRPC address per worker: the address of the worker's host
  (--worker-hosts, one per host; ranks are placed in blocks of OMPI_COMM_WORLD_LOCAL_SIZE)
  and --port + its rank on that host, so that workers of one host do not collide.
"""
import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch_backend"))
from trainer_data import TrainerOrder, normalised  # noqa: E402  (plain Python, no torch)


def read_idx(path):
    """A gzip IDX file of unsigned bytes as a numpy array; the header is checked against the
    file's length before it shapes anything."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] != 8 or not 1 <= raw[3] <= 4:
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
    nd = raw[3]
    if len(raw) < 4 + 4 * nd:
        raise SystemExit(f"{path}: truncated header")
    dims = struct.unpack(f">{nd}I", raw[4:4 + 4 * nd])
    body = raw[4 + 4 * nd:]
    if len(body) != int(np.prod(dims, dtype=np.int64)):
        raise SystemExit(f"{path}: header says {dims}, the file has {len(body)} bytes")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def fashion_mnist(directory, split, limit):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"))[:limit]
    y = read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"))[:limit]
    # NHWC: Keras's Conv2D default layout on CPU.
    return normalised(x.astype(np.float32))[..., None], y.astype(np.int64)


def launch_context(a):
    """(rank, size, local_rank, local_size) from Open MPI's variables, or from this script's
    own one-host launch."""
    env = os.environ
    if "OMPI_COMM_WORLD_SIZE" in env:
        return (int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"]),
                int(env["OMPI_COMM_WORLD_LOCAL_RANK"]), int(env["OMPI_COMM_WORLD_LOCAL_SIZE"]))
    if "FC_TF_RANK" in env:
        n = int(env["FC_TF_SIZE"])
        return int(env["FC_TF_RANK"]), n, int(env["FC_TF_RANK"]), n
    return None


def tf_config(a, rank, size, local_size):
    hosts = a.worker_hosts.split(",") if a.worker_hosts else ["127.0.0.1"]
    if size % local_size or size // local_size != len(hosts):
        raise SystemExit(f"{size} workers in blocks of {local_size} per host need "
                         f"{max(1, size // local_size)} --worker-hosts, got {len(hosts)}")
    workers = [f"{hosts[r // local_size]}:{a.port + r % local_size}" for r in range(size)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}


def build_model(tf, seed):
    """The CNN with torch's default initialisation for Conv2d / Linear."""
    L = tf.keras.layers

    def init(fan_in, k):
        bound = 1.0 / fan_in ** 0.5
        return dict(
            kernel_initializer=tf.keras.initializers.VarianceScaling(
                1.0 / 3, "fan_in", "uniform", seed=seed * 100 + k),
            bias_initializer=tf.keras.initializers.RandomUniform(-bound, bound,
                                                                 seed=seed * 100 + k + 50))

    return tf.keras.Sequential([
        L.Input((28, 28, 1)),
        L.Conv2D(16, 5, padding="same", activation="relu", **init(1 * 25, 1)),
        L.MaxPooling2D(2),
        L.Conv2D(32, 5, padding="same", activation="relu", **init(16 * 25, 2)),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(128, activation="relu", **init(32 * 7 * 7, 3)),
        L.Dense(10, **init(128, 4)),
    ])


def worker(a, rank, size, local_size):
    if a.global_batch % size:  # before TensorFlow starts: a worker alone would wait for the rest
        raise SystemExit(f"--global-batch {a.global_batch} does not split over {size} workers")
    os.environ["TF_CONFIG"] = json.dumps(tf_config(a, rank, size, local_size))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    # N workers share this machine's cores, as the torch peers do with --threads 1.
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    comm = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=a.bytes_per_pack,
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
    G = a.global_batch

    x, y = fashion_mnist(a.data, "train", a.limit)

    def dataset(ctx):
        # Worker r takes its slice of each global batch, the batches taken from the trainers'
        # permutation of the samples, a new one each epoch (the torch peers' order too).
        b, r = ctx.get_per_replica_batch_size(G), ctx.input_pipeline_id
        per_epoch = len(x) // G
        if per_epoch == 0:
            raise SystemExit(f"--global-batch {G} is larger than the {len(x)} samples")
        order, perm, idx = TrainerOrder(a.seed), None, []
        for step in range(a.warmup + a.steps):
            s = step % per_epoch
            if s == 0:
                perm = order.permutation(len(x))
            idx += perm[s * G + r * b:s * G + (r + 1) * b]
        # repeat(): an infinite dataset spares the distributed iterator its per-step
        # cross-worker "is there more data" reduction (the steps never reach the wrap).
        return tf.data.Dataset.from_tensor_slices((x[idx], y[idx])).batch(
            b, drop_remainder=True).repeat().prefetch(2)

    data = iter(strategy.distribute_datasets_from_function(dataset))
    with strategy.scope():
        model = build_model(tf, a.seed)
        opt = tf.keras.optimizers.SGD(learning_rate=0.02, momentum=0.9)

    @tf.function
    def train_step(batch):
        def replica_step(xb, yb):
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                per = tf.keras.losses.sparse_categorical_crossentropy(yb, logits,
                                                                      from_logits=True)
                # Averaged over the global batch: the all-reduced SUM of gradients is then
                # the gradient of the global mean, as DDP's and Horovod's averages give.
                loss = tf.nn.compute_average_loss(per, global_batch_size=G)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        per_replica = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    if rank == 0:
        print(f"# TF {tf.__version__} MultiWorkerMirroredStrategy, {size} workers, "
              f"{a.threads} thread(s) each; RING, bytes_per_pack {a.bytes_per_pack}; "
              f"global batch {G}; TF_CONFIG {os.environ['TF_CONFIG']}", flush=True)
    loss = None
    for _ in range(a.warmup):  # tracing, the collectives' first group resolution
        loss = train_step(next(data))
    start = time.perf_counter()
    for _ in range(a.steps):
        loss = train_step(next(data))
    loss = float(loss)  # waits for the last step
    took = time.perf_counter() - start
    if rank == 0:
        xt, yt = fashion_mnist(a.data, "test", a.test_limit)
        # Every replica holds the same weights; rank 0 evaluates its own copy alone.
        correct = 0
        for i in range(0, len(xt), 1000):
            pred = np.argmax(model(xt[i:i + 1000], training=False).numpy(), axis=1)
            correct += int((pred == yt[i:i + 1000]).sum())
        print(f"cnn          {params / 1e6:.2f}M params, global batch {G}: tf-mwms "
              f"{a.steps * G / took:9.1f} samples/s (loss {loss:.4f}) test_acc "
              f"{correct / len(xt):.4f} after {(a.warmup + a.steps) * G} samples", flush=True)


def spawn(a):
    """One host: start --workers copies of this script, each told its rank."""
    procs = []
    for r in range(a.workers):
        env = dict(os.environ, FC_TF_RANK=str(r), FC_TF_SIZE=str(a.workers))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                                      env=env))
    # A worker that dies leaves the others waiting in a collective: stop them all then.
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed or all(c == 0 for c in codes):
            break
        time.sleep(0.5)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        p.wait()
    return failed[0] if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2, help="workers to start (without mpirun)")
    ap.add_argument("--worker-hosts", default=None,
                    help="the hosts' addresses, comma separated, in rank order (default "
                         "127.0.0.1: one host)")
    ap.add_argument("--port", type=int, default=29700, help="first gRPC port on each host")
    ap.add_argument("--bytes-per-pack", type=int, default=0,
                    help="CommunicationOptions.bytes_per_pack (0: TensorFlow's choice)")
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="TF intra/inter-op threads per worker")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=60000, help="training samples loaded")
    ap.add_argument("--test-limit", type=int, default=10000)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    ctx = launch_context(a)
    if ctx is None:
        return spawn(a)
    rank, size, _, local_size = ctx
    worker(a, rank, size, local_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
