set -u
B=.carry/s5/ipc-conformance
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; cat .carry/s5/rev.txt; } > $OUT/machine.txt 2>&1
t0=$(date +%s)
IPC_CONFORMANCE_REUSE_WORKERS=0 timeout 240 $B explore --backend cuda -q --shrink-runs-real 30 --out /tmp/rC $(ls .carry/s5/recheck/*.ipc | sed 's/^/--recheck /') > $OUT/recheck.log 2>&1
echo "recheck rc=$? $(( $(date +%s)-t0 ))s" >> $OUT/times.txt
tar czf $OUT/recheck.tgz -C /tmp rC
t1=$(date +%s)
timeout 300 $B differential --dialect all -q --out /tmp/diff > $OUT/differential.log 2>&1; echo "differential rc=$? $(( $(date +%s)-t1 ))s" >> $OUT/times.txt
timeout 40 $B run --backend cuda --dialect all -q --filter mem.lifetime.freed-export-claimed-then-reused,mem.handle.format-byte-odd-size,event.get.per-context-pool --out /tmp/runx > $OUT/run-new.log 2>&1
tar czf $OUT/differential.tgz -C /tmp diff runx
cat $OUT/times.txt; cat /tmp/rC/recheck.txt; grep "^DIFF\|compared:" $OUT/differential.log
