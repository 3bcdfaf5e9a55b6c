#!/bin/sh
# The differential of the six clauses written from the seed-7001
# rechecks, then more recorded seed-7001 cases from case 1000 on.
# Run from the repository root, with a release build of `ipc-conformance` on
# PATH and an NVIDIA GPU:
#   sh reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/recheck-clauses-and-record-seed7001-more/reproduce.sh [DEST]
# Writes its logs and reports to DEST (default: recheck-clauses-and-record-seed7001-more-out).
set -u
HERE=$(dirname "$0")
DEST=${1:-recheck-clauses-and-record-seed7001-more-out}
CLAUSES=conformance/clauses
mkdir -p "$DEST"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; git rev-parse --short HEAD; } > "$DEST/machine.txt" 2>&1
t0=$(date +%s)
timeout 60 ipc-conformance differential --clauses "$CLAUSES" --dialect all -q \
  --filter mem.handle.check-word-with-vmm-allocation,mem.handle.check-word-with-two-vmm-handles,mem.lifetime.large-malloc-claims-freed-export-va,mem.close.memset-after-close-from-other-context,event.get.other-context-bytes-open-slot-event,mem.open.second-context-before-copy-table \
  --out "$DEST/differential" > "$DEST/differential.log" 2>&1
echo "differential rc=$? $(( $(date +%s)-t0 ))s" >> "$DEST/times.txt"
t1=$(date +%s)
IPC_CONFORMANCE_REUSE_WORKERS=1 timeout 500 ipc-conformance explore --backend cuda --seed 7001 --first-case 1000 --dialect all \
  --shrink-runs-real 0 --record "$DEST/recorded-7001-2.jsonl" --time-limit-s 470 -q --out "$DEST/explore-2" > "$DEST/explore-2.log" 2>&1
echo "explore-2 rc=$? $(( $(date +%s)-t1 ))s" >> "$DEST/times.txt"
gzip -9 "$DEST/recorded-7001-2.jsonl"
cat "$DEST/times.txt"; grep "^DIFF\|compared:" "$DEST/differential.log"; tail -2 "$DEST/explore-2.log"
