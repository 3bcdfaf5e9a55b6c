#!/usr/bin/env bash
# Whether the driver serialises fresh CUDA processes across devices: the
# same context_cost work run alone on device 0, then on devices 0 and 1 at
# once (each process sees one device through CUDA_VISIBLE_DEVICES), then
# twice on device 0 at once. Wall time per batch and each process's own
# figures. Usage: two_devices.sh [BUILD_DIR]
set -u
source "$(dirname "$0")/build.sh"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
now() { date +%s.%N; }
batch() { # LABEL DEVICES... (one process per listed device) -- ARGS
  local label=$1; shift
  local devs=()
  while [ "$1" != "--" ]; do devs+=("$1"); shift; done
  shift
  local t0 pids=() i=0
  t0=$(now)
  for d in "${devs[@]}"; do
    CUDA_VISIBLE_DEVICES=$d "$p" "$@" >"/tmp/two_devices.$i" 2>&1 & pids+=($!)
    i=$((i + 1))
  done
  wait "${pids[@]}"
  printf '%-44s wall %6.0f ms |' "$label" "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { print (b - a) * 1000 }')"
  for ((j = 0; j < i; j++)); do printf ' [%s]' "$(tr '\n' ' ' <"/tmp/two_devices.$j")"; done
  echo
}
for what in "init" "create 4" "exit 0" "exit 2"; do
  echo "## $what"
  for r in 1 2; do
    batch "alone on 0" 0 -- $what
    batch "devices 0 and 1 at once" 0 1 -- $what
    batch "twice on device 0 at once" 0 0 -- $what
  done
done
echo "## four processes: two per device, at once, against four on device 0"
batch "0 0 1 1 at once, init" 0 0 1 1 -- init
batch "0 0 0 0 at once, init" 0 0 0 0 -- init
echo done
