set -u
B=.carry/s9/ipc-conformance
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -2; cat .carry/s9/rev.txt; } > $OUT/machine.txt 2>&1
mkdir -p /tmp/probes
t0=$(date +%s)
for f in .carry/s9/probe/*.ipc; do n=$(basename $f .ipc)
  for d in runtime driver; do
    echo "=== $n $d" >> /tmp/probes/probes.log
    timeout 30 $B scenario $f --backend cuda --dialect $d >> /tmp/probes/probes.log 2>&1; echo "rc=$?" >> /tmp/probes/probes.log
  done
done
echo "probes $(( $(date +%s)-t0 ))s" >> $OUT/times.txt
cp /tmp/probes/probes.log $OUT/
t1=$(date +%s)
IPC_CONFORMANCE_REUSE_WORKERS=0 timeout 420 $B explore --backend cuda -q --shrink-runs-real 40 --out /tmp/rC $(ls .carry/s9/recheck/*.ipc | sed 's/^/--recheck /') > $OUT/recheck.log 2>&1
echo "recheck rc=$? $(( $(date +%s)-t1 ))s" >> $OUT/times.txt
tar czf $OUT/recheck.tgz -C /tmp rC
cat $OUT/times.txt; cat /tmp/rC/recheck.txt
