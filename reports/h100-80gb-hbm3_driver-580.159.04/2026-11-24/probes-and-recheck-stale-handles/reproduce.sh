#!/bin/sh
# Probes (handle byte 24 by size, the memset/free race, frees from other
# contexts) on fresh workers, and `explore --recheck` of six reproducing
# recorded cases.
# Run from the repository root, with a release build of `ipc-conformance` on
# PATH and an NVIDIA GPU:
#   sh reports/h100-80gb-hbm3_driver-580.159.04/2026-11-24/probes-and-recheck-stale-handles/reproduce.sh [DEST]
# Writes its logs and reports to DEST (default: probes-and-recheck-stale-handles-out).
set -u
HERE=$(dirname "$0")
DEST=${1:-probes-and-recheck-stale-handles-out}
CLAUSES=conformance/clauses
mkdir -p "$DEST"
export IPC_CONFORMANCE_REUSE_WORKERS=0
RERUNS="$HERE/../rerun-recorded-differences-fresh-workers/reruns"
t0=$(date +%s)
for f in "$HERE"/probes/*.ipc; do
  case $f in *p986*) ds=runtime;; *p1525*) ds="driver driver driver driver runtime";; *) ds="runtime driver";; esac
  for d in $ds; do echo "=== $f $d"; timeout 60 ipc-conformance scenario "$f" --backend cuda --dialect $d; echo "rc=$?"; done
done > "$DEST/probes.log" 2>&1
t1=$(date +%s); echo "probes $((t1-t0))s" >> "$DEST/times.txt"
timeout 430 ipc-conformance explore --backend cuda -q --shrink-runs-real 30 --out "$DEST/recheck" \
  $(for c in 915 890 37 88 285 399; do ls "$RERUNS"/*-c$c-*.ipc | sed 's/^/--recheck /'; done) > "$DEST/recheckA.log" 2>&1
echo "recheckA rc=$? $(( $(date +%s)-t1 ))s" >> "$DEST/times.txt"
cat "$DEST/times.txt" "$DEST/recheck/recheck.txt"
