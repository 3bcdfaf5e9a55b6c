#!/usr/bin/env bash
# How making a context and a process's exit cost grow with the contexts
# other processes hold on the same GPU. Usage: load.sh [BUILD_DIR]
set -u
source "$(dirname "$0")/build.sh"
probe() { # PROCESSES CONTEXTS_EACH [ENV]
  local holders="" i
  for ((i = 0; i < $1; i++)); do env ${3:-} "$p" hold 40 "$2" & holders="$holders $!"; done
  sleep $(( $1 / 2 + 2 ))
  echo "## $1 other processes holding primary + $2 contexts each ${3:-}"
  "$p" create 4; "$p" exit 0; "$p" exit 2
  kill $holders 2>/dev/null; wait $holders 2>/dev/null
}
probe 0 0
probe 6 0
probe 2 2
probe 12 0
probe 6 3
probe 24 0
probe 6 3 CUDA_DEVICE_MAX_CONNECTIONS=1
echo "## created with CUDA_DEVICE_MAX_CONNECTIONS=1 while 6 hold 3 each (default)"
for i in 1 2 3 4 5 6; do "$p" hold 40 3 & h="${h:-} $!"; done; sleep 5
CUDA_DEVICE_MAX_CONNECTIONS=1 "$p" create 4; kill $h; wait $h 2>/dev/null
echo done
