# Sourced by the probe scripts: builds context_cost.c into BUILD_DIR (their
# first argument, default /tmp/context-cost) and sets $p to the program.
dir=${1:-/tmp/context-cost}
mkdir -p "$dir"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
nvcc -O2 -o "$dir/context_cost" "$here/context_cost.c" -lcuda || exit 1
p="$dir/context_cost"
