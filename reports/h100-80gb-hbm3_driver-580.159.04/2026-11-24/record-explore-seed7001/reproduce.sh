#!/bin/sh
# A recorded explore run of seed 7001 (cases the simulator had not seen),
# the recording gzipped as in ../recorded-seed7001.
# Run from the repository root, with a release build of `ipc-conformance` on
# PATH and an NVIDIA GPU:
#   sh reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/record-explore-seed7001/reproduce.sh [DEST]
# Writes its logs and reports to DEST (default: record-explore-seed7001-out).
set -u
HERE=$(dirname "$0")
DEST=${1:-record-explore-seed7001-out}
CLAUSES=conformance/clauses
mkdir -p "$DEST"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; git rev-parse --short HEAD; } > "$DEST/machine.txt" 2>&1
export IPC_CONFORMANCE_REUSE_WORKERS=1
t0=$(date +%s)
timeout 560 ipc-conformance explore --backend cuda --seed 7001 --dialect all --shrink-runs-real 0 \
  --record "$DEST/recorded-7001.jsonl" --time-limit-s 520 -q --out "$DEST/explore" > "$DEST/explore.log" 2>&1
echo "explore rc=$? $(( $(date +%s)-t0 ))s" >> "$DEST/times.txt"
gzip -9 "$DEST/recorded-7001.jsonl"
cat "$DEST/times.txt"; tail -3 "$DEST/explore.log"
