set -u
B=.carry/s10/ipc-conformance
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; cat .carry/s10/rev.txt; } > $OUT/machine.txt 2>&1
t0=$(date +%s)
timeout 90 $B run --backend cuda --dialect all --filter mem.handle.flipped-offset-importer-with-reservation,mem.lifetime.freed-while-mapped-serial-copy,mem.lifetime.kernel-read-after-free-from-other-context,mem.close.kernel-read-after-close-from-other-context,vmm.reserve.after-faulting-read,mem.lifetime.destroyed-context-va-to-next-context --out /tmp/runnew > $OUT/run-new.log 2>&1; echo "run-new rc=$? $(( $(date +%s)-t0 ))s" >> $OUT/times.txt
t1=$(date +%s)
timeout 300 $B differential --dialect all -q --out /tmp/diff > $OUT/differential.log 2>&1; echo "differential rc=$? $(( $(date +%s)-t1 ))s" >> $OUT/times.txt
tar czf $OUT/results.tgz -C /tmp runnew diff
cat $OUT/times.txt; grep -v "^PASS" $OUT/run-new.log | head -30; grep "compared:\|^DIFF" $OUT/differential.log
