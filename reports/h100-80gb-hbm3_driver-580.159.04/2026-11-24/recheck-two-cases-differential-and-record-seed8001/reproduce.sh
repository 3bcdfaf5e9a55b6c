#!/bin/sh
# `explore --recheck` on fresh workers of seed-7001 cases 176 and 1595,
# the whole-catalogue differential, then a recorded explore run of seed
# 8001 for what is left of about 555 s.
# Run from the repository root, with a release build of `ipc-conformance` on
# PATH and an NVIDIA GPU:
#   sh reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/recheck-two-cases-differential-and-record-seed8001/reproduce.sh [DEST]
# Writes its logs and reports to DEST (default: recheck-two-cases-differential-and-record-seed8001-out).
set -u
HERE=$(dirname "$0")
DEST=${1:-recheck-two-cases-differential-and-record-seed8001-out}
CLAUSES=conformance/clauses
mkdir -p "$DEST"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; git rev-parse --short HEAD; } > "$DEST/machine.txt" 2>&1
t0=$(date +%s)
IPC_CONFORMANCE_REUSE_WORKERS=0 timeout 150 ipc-conformance explore --backend cuda -q --shrink-runs-real 30 --out "$DEST/recheck" \
  --recheck "$HERE/recheck-input/case176.ipc" --recheck "$HERE/recheck-input/case1595.ipc" > "$DEST/recheck.log" 2>&1
echo "recheck rc=$? $(( $(date +%s)-t0 ))s" >> "$DEST/times.txt"
t1=$(date +%s)
timeout 260 ipc-conformance differential --clauses "$CLAUSES" --dialect all -q --out "$DEST/differential" > "$DEST/differential.log" 2>&1
echo "differential rc=$? $(( $(date +%s)-t1 ))s" >> "$DEST/times.txt"
el=$(( $(date +%s)-t0 )); left=$(( 555-el ))
if [ $left -gt 60 ]; then
  t2=$(date +%s)
  IPC_CONFORMANCE_REUSE_WORKERS=1 timeout $((left+20)) ipc-conformance explore --backend cuda --seed 8001 --dialect all --shrink-runs-real 0 \
    --record "$DEST/recorded-8001.jsonl" --time-limit-s $left -q --out "$DEST/explore-8001" > "$DEST/explore-8001.log" 2>&1
  echo "explore-8001 rc=$? $(( $(date +%s)-t2 ))s" >> "$DEST/times.txt"
  gzip -9 "$DEST/recorded-8001.jsonl"
fi
cat "$DEST/times.txt" "$DEST/recheck/recheck.txt"; grep "^DIFF\|compared:" "$DEST/differential.log"
