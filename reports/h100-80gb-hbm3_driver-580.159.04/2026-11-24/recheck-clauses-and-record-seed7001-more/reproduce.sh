set -u
B=.carry/s6/ipc-conformance
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; cat .carry/s6/rev.txt; } > $OUT/machine.txt 2>&1
t0=$(date +%s)
timeout 60 $B differential --dialect all -q --filter mem.handle.check-word-with-vmm-allocation,mem.handle.check-word-with-two-vmm-handles,mem.lifetime.large-malloc-claims-freed-export-va,mem.close.memset-after-close-from-other-context,event.get.other-context-bytes-open-slot-event,mem.open.second-context-before-copy-table --out /tmp/diff > $OUT/differential.log 2>&1; echo "differential rc=$? $(( $(date +%s)-t0 ))s" >> $OUT/times.txt
t1=$(date +%s)
IPC_CONFORMANCE_REUSE_WORKERS=1 timeout 500 $B explore --backend cuda --seed 7001 --first-case 1000 --dialect all --shrink-runs-real 0 --record /tmp/recorded-7001-2.jsonl --time-limit-s 470 -q --out /tmp/e7001 > $OUT/explore-2.log 2>&1
echo "explore-2 rc=$? $(( $(date +%s)-t1 ))s" >> $OUT/times.txt
gzip -c /tmp/recorded-7001-2.jsonl > $OUT/recorded-7001-2.jsonl.gz
cp /tmp/e7001/summary.json $OUT/summary-2.json
cp /tmp/diff/differential.md $OUT/ 2>/dev/null
cat $OUT/times.txt; grep "^DIFF\|compared:" $OUT/differential.log; tail -2 $OUT/explore-2.log
