set -u
B=.carry/s8/ipc-conformance
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; cat .carry/s8/rev.txt; } > $OUT/machine.txt 2>&1
t0=$(date +%s)
IPC_CONFORMANCE_REUSE_WORKERS=0 timeout 150 $B explore --backend cuda -q --shrink-runs-real 30 --out /tmp/rC --recheck .carry/s8/recheck/case176.ipc --recheck .carry/s8/recheck/case1595.ipc > $OUT/recheck.log 2>&1
echo "recheck rc=$? $(( $(date +%s)-t0 ))s" >> $OUT/times.txt
tar czf $OUT/recheck.tgz -C /tmp rC
t1=$(date +%s)
timeout 260 $B differential --dialect all -q --out /tmp/diff > $OUT/differential.log 2>&1; echo "differential rc=$? $(( $(date +%s)-t1 ))s" >> $OUT/times.txt
tar czf $OUT/differential.tgz -C /tmp diff
el=$(( $(date +%s)-t0 )); left=$(( 555-el ))
if [ $left -gt 60 ]; then
t2=$(date +%s)
IPC_CONFORMANCE_REUSE_WORKERS=1 timeout $((left+20)) $B explore --backend cuda --seed 8001 --dialect all --shrink-runs-real 0 --record /tmp/recorded-8001.jsonl --time-limit-s $left -q --out /tmp/e8001 > $OUT/explore-8001.log 2>&1
echo "explore-8001 rc=$? $(( $(date +%s)-t2 ))s" >> $OUT/times.txt
gzip -c /tmp/recorded-8001.jsonl > $OUT/recorded-8001.jsonl.gz
cp /tmp/e8001/summary.json $OUT/summary-8001.json
fi
cat $OUT/times.txt; cat /tmp/rC/recheck.txt; grep "^DIFF\|compared:" $OUT/differential.log; tail -2 $OUT/explore-8001.log
