#!/usr/bin/env bash
# Runs context_cost's probes in one go on a GPU host; see context_cost.c.
# Usage: tools/gpu-probes/context_cost.sh [BUILD_DIR]
set -u
source "$(dirname "$0")/build.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "## a process's start, alone"
for i in 1 2 3; do "$p" init; done
echo "## contexts made and destroyed, alone (flags 0)"
for i in 1 2 3; do "$p" create 4; done
echo "## the same with CUDA_DEVICE_MAX_CONNECTIONS=1"
for i in 1 2; do CUDA_DEVICE_MAX_CONNECTIONS=1 "$p" create 4; done
echo "## the same with CU_CTX_SCHED_BLOCKING_SYNC (0x4) and CU_CTX_LMEM_RESIZE_TO_MAX (0x10)"
"$p" create 4 0x4; "$p" create 4 0x10
echo "## exits, alone"
for k in 0 1 2 4; do for i in 1 2; do "$p" exit $k; done; done
echo "## contexts made while 6 other processes hold primary + 2 contexts"
holders=""
for i in 1 2 3 4 5 6; do "$p" hold 30 & holders="$holders $!"; done
sleep 8
for i in 1 2; do "$p" create 4; done
for k in 0 2; do "$p" exit $k; done
kill $holders 2>/dev/null; wait $holders 2>/dev/null
echo "## a process's calls alone, then while another makes and destroys contexts"
"$p" calls 3
"$p" churn 4 & c=$!; sleep 0.5; "$p" calls 3; wait $c
echo "## a process's calls while other processes start (init loop)"
( end=$((SECONDS+4)); while [ $SECONDS -lt $end ]; do "$p" init >/dev/null; done ) & c=$!
sleep 0.3; "$p" calls 3; wait $c
echo "## contexts made while another process starts over and over"
( end=$((SECONDS+5)); while [ $SECONDS -lt $end ]; do "$p" init >/dev/null; done ) & c=$!
sleep 0.3; "$p" create 4; "$p" create 4; wait $c
echo done
