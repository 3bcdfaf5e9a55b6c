#!/bin/sh
# Probe scenarios in both dialects for the rules of seed-7001 cases 176
# and 1595 and seed-8001 cases 172 and 70, and `explore --recheck` on
# fresh workers of the differing seed-8001 cases.
# Run from the repository root, with a release build of `ipc-conformance` on
# PATH and an NVIDIA GPU:
#   sh reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/recheck-seed8001-differences-and-probes/reproduce.sh [DEST]
# Writes its logs and reports to DEST (default: recheck-seed8001-differences-and-probes-out).
set -u
HERE=$(dirname "$0")
DEST=${1:-recheck-seed8001-differences-and-probes-out}
CLAUSES=conformance/clauses
mkdir -p "$DEST"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; git rev-parse --short HEAD; } > "$DEST/machine.txt" 2>&1
t0=$(date +%s)
for f in "$HERE"/probes/*.ipc; do n=$(basename "$f" .ipc)
  for d in runtime driver; do
    echo "=== $n $d"; timeout 30 ipc-conformance scenario "$f" --backend cuda --dialect $d; echo "rc=$?"
  done
done > "$DEST/probes.log" 2>&1
echo "probes $(( $(date +%s)-t0 ))s" >> "$DEST/times.txt"
t1=$(date +%s)
IPC_CONFORMANCE_REUSE_WORKERS=0 timeout 420 ipc-conformance explore --backend cuda -q --shrink-runs-real 40 --out "$DEST/recheck" \
  $(ls "$HERE"/recheck-input/*.ipc | sed 's/^/--recheck /') > "$DEST/recheck.log" 2>&1
echo "recheck rc=$? $(( $(date +%s)-t1 ))s" >> "$DEST/times.txt"
cat "$DEST/times.txt" "$DEST/recheck/recheck.txt"
