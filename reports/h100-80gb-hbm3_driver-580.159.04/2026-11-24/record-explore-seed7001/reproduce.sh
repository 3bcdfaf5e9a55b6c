set -u
B=.carry/s4/ipc-conformance
export IPC_CONFORMANCE_REUSE_WORKERS=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; cat .carry/s4/rev.txt; } > $OUT/machine.txt 2>&1
t0=$(date +%s)
timeout 560 $B explore --backend cuda --seed 7001 --dialect all --shrink-runs-real 0 --record /tmp/recorded-7001.jsonl --time-limit-s 520 -q --out /tmp/e7001 > $OUT/explore.log 2>&1
echo "explore rc=$? $(( $(date +%s)-t0 ))s" >> $OUT/times.txt
gzip -c /tmp/recorded-7001.jsonl > $OUT/recorded-7001.jsonl.gz
cp /tmp/e7001/summary.json /tmp/e7001/summary.md $OUT/ 2>/dev/null
cat $OUT/times.txt; tail -3 $OUT/explore.log
