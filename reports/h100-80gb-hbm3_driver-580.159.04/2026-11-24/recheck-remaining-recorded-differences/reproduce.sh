#!/bin/sh
# `explore --recheck` on fresh workers of the seven other recorded cases
# that reproduced.
# Run from the repository root, with a release build of `ipc-conformance` on
# PATH and an NVIDIA GPU:
#   sh reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/recheck-remaining-recorded-differences/reproduce.sh [DEST]
# Writes its logs and reports to DEST (default: recheck-remaining-recorded-differences-out).
set -u
HERE=$(dirname "$0")
DEST=${1:-recheck-remaining-recorded-differences-out}
CLAUSES=conformance/clauses
mkdir -p "$DEST"
export IPC_CONFORMANCE_REUSE_WORKERS=0
RERUNS="$HERE/../rerun-recorded-differences-fresh-workers/reruns"
t1=$(date +%s)
timeout 560 ipc-conformance explore --backend cuda -q --shrink-runs-real 30 --out "$DEST/recheck" \
  $(for c in 603 718 776 883 966 1041 1053; do ls "$RERUNS"/*-c$c-*.ipc | sed 's/^/--recheck /'; done) > "$DEST/recheckB.log" 2>&1
echo "recheckB rc=$? $(( $(date +%s)-t1 ))s" >> "$DEST/times.txt"
cat "$DEST/times.txt" "$DEST/recheck/recheck.txt"
