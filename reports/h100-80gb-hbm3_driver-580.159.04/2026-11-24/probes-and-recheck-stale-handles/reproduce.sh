set -u
B=.carry/s4/ipc-conformance
export IPC_CONFORMANCE_REUSE_WORKERS=0
t0=$(date +%s)
for f in .carry/s4/probes/*.ipc; do case $f in *p986*) ds=runtime;; *p1525*) ds="driver driver driver driver runtime";; *) ds="runtime driver";; esac
 for d in $ds; do echo "=== $f $d"; timeout 60 $B scenario $f --backend cuda --dialect $d; echo "rc=$?"; done; done > $OUT/probes.log 2>&1
t1=$(date +%s); echo "probes $((t1-t0))s" >> $OUT/times.txt
timeout 430 $B explore --backend cuda -q --shrink-runs-real 30 --out /tmp/rA $(for c in 915 890 37 88 285 399; do ls .carry/s4/recheck/*-c$c-*.ipc | sed 's/^/--recheck /'; done) > $OUT/recheckA.log 2>&1
echo "recheckA rc=$? $(( $(date +%s)-t1 ))s" >> $OUT/times.txt
cat $OUT/times.txt; cat /tmp/rA/recheck.txt; tar czf $OUT/rA.tgz -C /tmp rA
