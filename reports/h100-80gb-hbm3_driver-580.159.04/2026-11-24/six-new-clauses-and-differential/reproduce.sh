#!/bin/sh
# The six clauses written from the rechecks and probes, run in every
# dialect, and the whole-catalogue differential.
# Run from the repository root, with a release build of `ipc-conformance` on
# PATH and an NVIDIA GPU:
#   sh reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/six-new-clauses-and-differential/reproduce.sh [DEST]
# Writes its logs and reports to DEST (default: six-new-clauses-and-differential-out).
set -u
HERE=$(dirname "$0")
DEST=${1:-six-new-clauses-and-differential-out}
CLAUSES=conformance/clauses
mkdir -p "$DEST"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; git rev-parse --short HEAD; } > "$DEST/machine.txt" 2>&1
t0=$(date +%s)
timeout 90 ipc-conformance run --clauses "$CLAUSES" --backend cuda --dialect all \
  --filter mem.handle.flipped-offset-importer-with-reservation,mem.lifetime.freed-while-mapped-serial-copy,mem.lifetime.kernel-read-after-free-from-other-context,mem.close.kernel-read-after-close-from-other-context,vmm.reserve.after-faulting-read,mem.lifetime.destroyed-context-va-to-next-context \
  --out "$DEST/run-new" > "$DEST/run-new.log" 2>&1
echo "run-new rc=$? $(( $(date +%s)-t0 ))s" >> "$DEST/times.txt"
t1=$(date +%s)
timeout 300 ipc-conformance differential --clauses "$CLAUSES" --dialect all -q --out "$DEST/differential" > "$DEST/differential.log" 2>&1
echo "differential rc=$? $(( $(date +%s)-t1 ))s" >> "$DEST/times.txt"
cat "$DEST/times.txt"; grep -v "^PASS" "$DEST/run-new.log" | head -30; grep "compared:\|^DIFF" "$DEST/differential.log"
