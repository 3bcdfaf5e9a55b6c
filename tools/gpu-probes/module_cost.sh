#!/usr/bin/env bash
# Runs module_cost's probes on a GPU host; see module_cost.c.
# Usage: tools/gpu-probes/module_cost.sh [BUILD_DIR]
set -u
dir=${1:-/tmp/module-cost}
mkdir -p "$dir"
here=$(cd "$(dirname "$0")" && pwd)
nvcc -O2 -o "$dir/module_cost" "$here/module_cost.c" -lcuda || exit 1
p="$dir/module_cost"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "HOME=${HOME-unset} CUDA_CACHE_DISABLE=${CUDA_CACHE_DISABLE-unset} CUDA_CACHE_PATH=${CUDA_CACHE_PATH-unset} CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING-unset}"
ls -d "${HOME:-/nonexistent}/.nv/ComputeCache" 2>&1
echo "## a device_read's phases, three fresh processes"
for i in 1 2 3; do "$p" read; done
echo "## the same with the JIT cache off"
for i in 1 2; do CUDA_CACHE_DISABLE=1 "$p" read; done
echo "## allocation addresses without and after a module load"
for k in 0 1 0 1; do echo "- module first: $k"; "$p" place $k; done
echo "## PTX to cubin once, then a cubin load"
for i in 1 2; do "$p" link; done
