#!/usr/bin/env bash
# Trace and check the validation programs on a GPU host.
#
# usage: tracer/validation/run.sh OUT_DIR
#   IPC_CONFORMANCE  the ipc-conformance binary (default target/release/ipc-conformance)
#   IPC_TRACER_LIB   a tracer library for trace to preload instead of the one
#                    ipc-conformance carries; the overhead loop preloads it
#                    (default target/release/libipc_tracer.so, from
#                    cargo build --release -p ipc-tracer)
#   NVCC, CC, CUDA_HOME, PYTHON as usual.
#
# For each program and variant it writes OUT_DIR/<program>-<variant>/ with
# the per-process traces, check.txt, check.json, summary.md, replay.ipc,
# command.txt (the command that made it) and expected.txt (the verdict the
# committed copy must keep: check's exit code and hazard kinds). Exits 1
# when a verdict is not the one the variant was written to produce.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${IPC_CONFORMANCE:-$root/target/release/ipc-conformance}
lib=${IPC_TRACER_LIB:-$root/target/release/libipc_tracer.so}
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc=${NVCC:-$cuda/bin/nvcc}
cc=${CC:-cc}
python=${PYTHON:-python3}
build="$out/build"
mkdir -p "$build"
failures=0

"$nvcc" -O2 -o "$build/simple_ipc" "$here/simple_ipc.cu" || { echo "nvcc failed"; exit 2; }
"$cc" -O2 -I"$cuda/include" -o "$build/mem_map_ipc_drv" "$here/mem_map_ipc_drv.c" \
    -L"$cuda/lib64/stubs" -lcuda || { echo "cc failed"; exit 2; }
"$cc" -O2 -o "$build/overhead" "$root/tracer/tests/programs/overhead.c" \
    -L"$cuda/lib64/stubs" -lcuda || { echo "cc failed"; exit 2; }

# name variant expected-exit expected-hazard command...
run() {
    local name=$1 variant=$2 want_code=$3 want_hazard=$4
    shift 4
    local dir="$out/$name-$variant"
    rm -rf "$dir"
    "$bin" trace --out "$dir" -- "$@" > "$dir.trace.log" 2>&1
    echo "ipc-conformance trace --out $name-$variant -- $*" > "$dir/command.txt"
    mv "$dir.trace.log" "$dir/trace.log"
    "$bin" check "$dir" > /dev/null 2>&1
    local code=$?
    if [ ! -f "$dir/check.json" ]; then
        echo "MISMATCH $name-$variant: nothing was recorded (see $dir/trace.log)"
        failures=$((failures + 1))
        return
    fi
    local kinds
    kinds=$("$python" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" ".join(sorted({f["kind"] for f in r["findings"] if f["class"]=="hazard"})))' "$dir/check.json" 2>/dev/null)
    printf 'exit %s\nhazards %s\n' "$code" "$kinds" > "$dir/expected.txt"
    if [ "$code" != "$want_code" ] || { [ -n "$want_hazard" ] && [[ " $kinds " != *" $want_hazard "* ]]; }; then
        echo "MISMATCH $name-$variant: check exit $code, hazards [$kinds]; wanted exit $want_code with $want_hazard"
        failures=$((failures + 1))
    else
        echo "ok       $name-$variant: check exit $code, hazards [$kinds]"
    fi
}

run simple_ipc ok 0 "" "$build/simple_ipc" ok
run simple_ipc free-before-close 1 free-while-mapped "$build/simple_ipc" free-before-close
run simple_ipc no-wait 1 unsynchronized-read "$build/simple_ipc" no-wait
run simple_ipc double-close 1 double-close "$build/simple_ipc" double-close
run simple_ipc leak 1 mapping-leaked-at-exit "$build/simple_ipc" leak
run mem_map_ipc_drv ok 0 "" "$build/mem_map_ipc_drv" ok
run mem_map_ipc_drv no-wait 1 unsynchronized-read "$build/mem_map_ipc_drv" no-wait
# Releasing while the importer maps is defined for VMM (cuMemRelease frees
# only once every mapping and handle is gone): clean.
run mem_map_ipc_drv free-before-close 0 "" "$build/mem_map_ipc_drv" free-before-close
run mem_map_ipc_drv double-close 1 double-release "$build/mem_map_ipc_drv" double-close
run mem_map_ipc_drv leak 1 vmm-leaked-at-exit "$build/mem_map_ipc_drv" leak
for v in ok free-before-close no-wait double-close leak; do
    case $v in
        ok) want=0; hz="" ;;
        free-before-close) want=1; hz=free-while-mapped ;;
        no-wait) want=1; hz=unsynchronized-read ;;
        double-close) want=1; hz=double-close ;;
        leak) want=1; hz=mapping-leaked-at-exit ;;
    esac
    run ipc_ctypes "$v" "$want" "$hz" "$python" "$here/ipc_ctypes.py" "$v"
done

# Overhead per traced call on the real driver: the same loop with and without the tracer.
{
    echo "without tracer: $("$build/overhead" 1000000)"
    rm -rf "$out/overhead-trace"
    mkdir -p "$out/overhead-trace"
    echo "with tracer:    $(LD_PRELOAD="$lib" IPC_TRACE_DIR="$out/overhead-trace" "$build/overhead" 1000000)"
    rm -rf "$out/overhead-trace"
} | tee "$out/overhead.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>/dev/null

echo "$failures mismatches"
[ "$failures" -eq 0 ]
