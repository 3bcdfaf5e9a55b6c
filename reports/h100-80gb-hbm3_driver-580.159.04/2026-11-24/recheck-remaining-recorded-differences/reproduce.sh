set -u
B=.carry/s4/ipc-conformance
export IPC_CONFORMANCE_REUSE_WORKERS=0
t1=$(date +%s)
timeout 560 $B explore --backend cuda -q --shrink-runs-real 30 --out /tmp/rB $(for c in 603 718 776 883 966 1041 1053; do ls .carry/s4/recheck/*-c$c-*.ipc | sed 's/^/--recheck /'; done) > $OUT/recheckB.log 2>&1
echo "recheckB rc=$? $(( $(date +%s)-t1 ))s" >> $OUT/times.txt
cat $OUT/times.txt; cat /tmp/rB/recheck.txt; tar czf $OUT/rB.tgz -C /tmp rB
