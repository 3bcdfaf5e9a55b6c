set -u
B=.carry/s3/ipc-conformance
export IPC_CONFORMANCE_REUSE_WORKERS=0
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; git log -1 --format=%h 2>/dev/null; } > $OUT/machine.txt 2>&1
t0=$(date +%s)
for r in 1 2; do for f in .carry/s3/reruns/*.ipc; do
  d=$(grep -o "dialect [a-z]*" $f | head -1 | awk '{print $2}'); s=$(grep -o "(seed [0-9]*" $f | head -1 | awk '{print $2}')
  echo "=== $f round $r"; timeout 60 $B scenario $f --backend cuda --dialect $d --seed $s; echo "rc=$?"
done; done > $OUT/reruns.log 2>&1
t1=$(date +%s); echo "reruns $((t1-t0))s" >> $OUT/times.txt
for f in .carry/s3/probes/*.ipc; do for d in runtime driver; do
  echo "=== $f $d"; timeout 60 $B scenario $f --backend cuda --dialect $d; echo "rc=$?"
done; done > $OUT/probes.log 2>&1
t2=$(date +%s); echo "probes $((t2-t1))s" >> $OUT/times.txt
timeout 200 $B differential --dialect all -q --out /tmp/diff > $OUT/differential.log 2>&1; echo "differential rc=$? $(( $(date +%s)-t2 ))s" >> $OUT/times.txt
tar czf $OUT/differential.tgz -C /tmp diff
cat $OUT/times.txt
