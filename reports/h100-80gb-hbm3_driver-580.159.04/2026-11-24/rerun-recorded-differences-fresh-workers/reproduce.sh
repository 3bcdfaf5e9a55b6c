#!/bin/sh
# The differing recorded cases run twice each on fresh workers, the probe
# scenarios in both dialects, and the whole-catalogue differential.
# Run from the repository root, with a release build of `ipc-conformance` on
# PATH and an NVIDIA GPU:
#   sh reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/rerun-recorded-differences-fresh-workers/reproduce.sh [DEST]
# Writes its logs and reports to DEST (default: rerun-recorded-differences-fresh-workers-out).
set -u
HERE=$(dirname "$0")
DEST=${1:-rerun-recorded-differences-fresh-workers-out}
CLAUSES=conformance/clauses
mkdir -p "$DEST"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; git rev-parse --short HEAD; } > "$DEST/machine.txt" 2>&1
export IPC_CONFORMANCE_REUSE_WORKERS=0
t0=$(date +%s)
for r in 1 2; do for f in "$HERE"/reruns/*.ipc; do
  d=$(grep -o "dialect [a-z]*" "$f" | head -1 | awk '{print $2}'); s=$(grep -o "(seed [0-9]*" "$f" | head -1 | awk '{print $2}')
  echo "=== $f round $r"; timeout 60 ipc-conformance scenario "$f" --backend cuda --dialect "$d" --seed "$s"; echo "rc=$?"
done; done > "$DEST/reruns.log" 2>&1
t1=$(date +%s); echo "reruns $((t1-t0))s" >> "$DEST/times.txt"
for f in "$HERE"/probes/*.ipc; do for d in runtime driver; do
  echo "=== $f $d"; timeout 60 ipc-conformance scenario "$f" --backend cuda --dialect $d; echo "rc=$?"
done; done > "$DEST/probes.log" 2>&1
t2=$(date +%s); echo "probes $((t2-t1))s" >> "$DEST/times.txt"
timeout 200 ipc-conformance differential --clauses "$CLAUSES" --dialect all -q --out "$DEST/differential" > "$DEST/differential.log" 2>&1
echo "differential rc=$? $(( $(date +%s)-t2 ))s" >> "$DEST/times.txt"
cat "$DEST/times.txt"
