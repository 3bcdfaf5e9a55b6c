#!/bin/sh
# `explore --recheck` on fresh workers of the differing seed-7001 cases,
# the whole-catalogue differential, and three new clauses run.
# Run from the repository root, with a release build of `ipc-conformance` on
# PATH and an NVIDIA GPU:
#   sh reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/recheck-seed7001-differences-and-differential/reproduce.sh [DEST]
# Writes its logs and reports to DEST (default: recheck-seed7001-differences-and-differential-out).
set -u
HERE=$(dirname "$0")
DEST=${1:-recheck-seed7001-differences-and-differential-out}
CLAUSES=conformance/clauses
mkdir -p "$DEST"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; git rev-parse --short HEAD; } > "$DEST/machine.txt" 2>&1
t0=$(date +%s)
IPC_CONFORMANCE_REUSE_WORKERS=0 timeout 240 ipc-conformance explore --backend cuda -q --shrink-runs-real 30 --out "$DEST/recheck" \
  $(ls "$HERE"/recheck-input/*.ipc | sed 's/^/--recheck /') > "$DEST/recheck.log" 2>&1
echo "recheck rc=$? $(( $(date +%s)-t0 ))s" >> "$DEST/times.txt"
t1=$(date +%s)
timeout 300 ipc-conformance differential --clauses "$CLAUSES" --dialect all -q --out "$DEST/differential" > "$DEST/differential.log" 2>&1
echo "differential rc=$? $(( $(date +%s)-t1 ))s" >> "$DEST/times.txt"
timeout 40 ipc-conformance run --clauses "$CLAUSES" --backend cuda --dialect all -q \
  --filter mem.lifetime.freed-export-claimed-then-reused,mem.handle.format-byte-odd-size,event.get.per-context-pool \
  --out "$DEST/run-new" > "$DEST/run-new.log" 2>&1
cat "$DEST/times.txt" "$DEST/recheck/recheck.txt"; grep "^DIFF\|compared:" "$DEST/differential.log"
