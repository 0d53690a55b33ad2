#!/usr/bin/env bash
# A real Slurm launch: starts munged, slurmctld and slurmd for this one host from a
# minimal configuration written here (nothing outside a temporary directory is touched),
# then runs gradsync programs under srun and checks their results:
#   srun -n 2 / -n 4 shm_launched   transport::shm::from_env() finds its group in Slurm's
#                                   variables (no MPI in the program)
#   srun --mpi=PLUGIN -n 2 / -n 4 PROG  MPI test programs, each as NAME=PLUGIN=PROG
#                                   (Open MPI: pmix; MPICH: see docs/slurm.md)
# Skips (77) where the daemons cannot start (not root, packages missing).
# Usage: slurm_check.sh SHM_LAUNCHED [NAME=PLUGIN=MPI_PROGRAM ...]
set -uo pipefail
shm_launched=${1:?usage: $0 SHM_LAUNCHED [NAME=MPI_PROGRAM ...]}
shift
for b in munged slurmctld slurmd srun sinfo; do
  command -v "$b" >/dev/null || { echo "SKIP: $b not installed (scripts/setup-deps installs slurm)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIP: slurmd needs root to start job steps here"; exit 77; }

D=$(mktemp -d /tmp/gradsync_slurm.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$D"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$D"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
  exit 1
}

host=$(hostname -s)
# Free ports for slurmctld and slurmd (the defaults may be taken by a real Slurm).
read -r p1 p2 < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
mkdir -p "$D/state" "$D/spool"
dd if=/dev/urandom of="$D/munge.key" bs=1024 count=1 status=none
chmod 400 "$D/munge.key"
cat >"$D/slurm.conf" <<CONF
ClusterName=gradsync-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$p1
SlurmdPort=$p2
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
cat >"$D/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
CONF
export SLURM_CONF=$D/slurm.conf

munged --force -S "$D/munge.sock" --key-file "$D/munge.key" --pid-file "$D/munged.pid" \
  --log-file "$D/munged.log" --seed-file "$D/munge.seed" -F >"$D/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$D/munge.sock" ] && break; sleep 0.1; done
[ -S "$D/munge.sock" ] || { echo "SKIP: munged did not start: $(tail -n 3 "$D/munged.log" 2>/dev/null)"; exit 77; }
slurmctld -D -i -f "$D/slurm.conf" >"$D/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$D/slurm.conf" >"$D/slurmd.out" 2>&1 &
pids+=($!)
up=
for _ in $(seq 150); do
  if sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then up=1; break; fi
  sleep 0.2
done
if [ -z "$up" ]; then
  echo "SKIP: Slurm did not come up in 30 s: $(sinfo -h -N -o '%N %T %E' 2>&1 | head -n 2)"
  tail -n 5 "$D"/slurmctld.log "$D"/slurmd.log 2>/dev/null
  exit 77
fi
echo "slurm $(sinfo -V | awk '{print $2}') up on $host (ports $p1, $p2)"

passed=0
for n in 2 4; do
  out=$(timeout 120 srun -n "$n" --overcommit "$shm_launched" Slurm "$n" 2>&1) ||
    { echo "$out" >&2; fail "srun -n $n shm_launched"; }
  echo "srun -n $n: $out"
  grep -q ": ok$" <<<"$out" || fail "srun -n $n shm_launched: $out"
  passed=$((passed + 1))
done
# MPI programs: NAME=PLUGIN=PROGRAM (srun --mpi=PLUGIN), a subset of the MPI test cases.
for spec in "$@"; do
  IFS== read -r name plugin prog <<<"$spec"
  for n in 2 4; do
    log="$D/$name.n$n.txt"
    if timeout 300 srun --mpi="$plugin" -n "$n" --overcommit "$prog" "transport: point-to-point" \
      "transport: split" "errors: count mismatch (ring)" >"$log" 2>&1 &&
      # n singletons of 1 rank each would pass too: the job must be one of n ranks.
      grep -q "^$name, $n ranks: .* 0 failed" "$log"; then
      echo "srun --mpi=$plugin -n $n $name: $(tail -n 1 "$log")"
      passed=$((passed + 1))
    else
      tail -n 30 "$log" >&2
      fail "srun --mpi=$plugin -n $n $name"
    fi
  done
done
echo "PASS: $passed srun launches"
