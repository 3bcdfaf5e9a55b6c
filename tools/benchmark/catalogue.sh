#!/usr/bin/env bash
# The whole catalogue on a CUDA host: every GPU figure of docs/performance.md
# that concerns it, within a time budget (BUDGET_S seconds, default 470:
# eight minutes on two H100s with room to spare). In order of need; a step
# the time left cannot hold is skipped and says so:
#   1. `run --check-sharing` over the whole catalogue on device 0: every
#      clause on fresh workers (check/fresh: the fresh figure and the
#      baseline verdicts), then under the policy with every clause that may
#      share once checked on reused workers (check/shared), those compared;
#      check/sharing-checked.txt says per clause what was found, and is the
#      file the policy reads from here on (sharing-checked.txt);
#   2. the whole catalogue under the policy with these results on device 0:
#      the check's shared side when nothing differed (it is that very run),
#      else a run of its own (catalogue-policy); its verdicts and traces
#      against the fresh side's (`diff --tiers all`);
#   3. the gate (contract and relied-on clauses) under the policy on device 0;
#   4. on a host with two devices or more, on all of them: the whole
#      catalogue with `--jobs auto`, then serially (the pair that says what
#      `--jobs auto` gains); then the gate with `--jobs auto` and serially;
#      then the check over the clauses that need two devices
#      (check-two-devices, whose results join sharing-checked.txt).
# STEPS=device0 runs steps 1-3 only, STEPS=devices step 4 only (for a
# device time limit shorter than the whole: two invocations, one machine);
# step 4 alone reads the check results SHARING_CHECKED names (step 1's
# sharing-checked.txt), else the policy's compiled-in ones.
# Writes catalogue.json, the logs (each run's profile at its end) and every
# run's reports under OUT, and prints a table.
# Usage: [STEPS=all|device0|devices] tools/benchmark/catalogue.sh BIN OUT
set -u
BIN=${1:?usage: catalogue.sh BIN OUT}
OUT=${2:?usage: catalogue.sh BIN OUT}
BUDGET_S=${BUDGET_S:-470}
STEPS=${STEPS:-all}
case "$STEPS" in all | device0 | devices) ;; *) echo "catalogue: STEPS is all, device0 or devices, not '$STEPS'" >&2; exit 2 ;; esac
SHARING_CHECKED=${SHARING_CHECKED:-}
[ -x "$BIN" ] || { echo "catalogue: no executable $BIN (cargo build --release -p ipc-conformance)" >&2; exit 2; }
mkdir -p "$OUT"
export IPC_CONFORMANCE_PROFILE=${IPC_CONFORMANCE_PROFILE:-1}
unset IPC_CONFORMANCE_SHARING_CHECKED CUDA_VISIBLE_DEVICES

begin=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - begin))); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# A run's own duration (results.json's run.duration_ms), in seconds.
run_s() { grep -o '"duration_ms": *[0-9.]*' "$1/results.json" 2>/dev/null | head -1 | awk -F: '{ printf "%.2f", $2 / 1000 }'; }
# NAME LIMIT_S CMD...: runs CMD (SIGINT at the limit: the run stops after
# its clause in progress and reports), its output in NAME.log; sets rc and s.
timed() {
  local name=$1 limit=$2 t0
  shift 2
  t0=$(now)
  timeout -s INT -k 20 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  s=$(secs "$t0" "$(now)")
  echo "catalogue: $name: exit $rc in $s s" >&2
}
# NAME EST_S CMD...: `timed` if EST_S seconds are left, else a note.
maybe() {
  local name=$1 est=$2
  shift 2
  if [ "$(left)" -lt "$est" ]; then
    echo "catalogue: $name skipped: $(left) s left of the budget, about $est s needed" >&2
    rc=skipped; s=null
    return 1
  fi
  timed "$name" "$(left)" "$@"
}
est() { awk -v x="$1" -v f="$2" 'BEGIN { printf "%d", x * f + 5 }'; }

nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > "$OUT/gpus.txt" 2>&1
devices=$(grep -c . "$OUT/gpus.txt")
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1
gate=$("$BIN" list 2>/dev/null | awk '$3 == "contract" || $3 == "relied-on" { print $1 }' | paste -sd, -)
two=$("$BIN" list 2>/dev/null | awk 'NR > 1 && $4 + 0 >= 2 { print $1 }' | paste -sd, -)
[ -n "$gate" ] || { echo "catalogue: no contract or relied-on clause listed" >&2; exit 2; }

checked="$OUT/sharing-checked.txt"
check_s=null check_rc=null identical=null policy_identical=null policy_rc=null gate_rc=null policy_from="not run"
if [ "$STEPS" != devices ]; then
# 1. The check over the whole catalogue, on device 0.
CUDA_VISIBLE_DEVICES=0 timed check "$(left)" "$BIN" run --check-sharing --backend cuda --dialect all -q --out "$OUT/check"
check_rc=$rc check_s=$s
fresh_s=$(run_s "$OUT/check/fresh")
shared_s=$(run_s "$OUT/check/shared")
differ=$(grep -c '^[^#][^ ]* differs ' "$OUT/check/sharing-checked.txt" 2>/dev/null)

cp "$OUT/check/sharing-checked.txt" "$checked" 2>/dev/null || : > "$checked"
export IPC_CONFORMANCE_SHARING_CHECKED="$checked"
identical=$(grep -c '^[^#][^ ]* identical ' "$checked")

# 2. The whole catalogue under the policy, on device 0.
if [ "${differ:-0}" = 0 ] && [ "$check_rc" -le 1 ] && [ -f "$OUT/check/shared/results.json" ]; then
  policy_dir="$OUT/check/shared" policy_rc=$check_rc policy_s=$shared_s policy_from="the check's shared side"
else
  policy_dir="$OUT/catalogue-policy" policy_from="a run of its own"
  CUDA_VISIBLE_DEVICES=0 maybe catalogue-policy "$(est "${shared_s:-90}" 1.1)" "$BIN" run --backend cuda --dialect all -q --out "$policy_dir"
  policy_rc=$rc policy_s=$(run_s "$policy_dir")
fi
"$BIN" diff --tiers all "$OUT/check/fresh/results.json" "$policy_dir/results.json" > "$OUT/catalogue-diff.log" 2>&1
policy_identical=$([ $? = 0 ] && echo true || echo false)

# 3. The gate, on device 0.
CUDA_VISIBLE_DEVICES=0 maybe gate 40 "$BIN" run --backend cuda --dialect all --filter "$gate" -q --out "$OUT/gate"
gate_rc=$rc gate_s=$(run_s "$OUT/gate")
elif [ -n "$SHARING_CHECKED" ]; then
  cp "$SHARING_CHECKED" "$checked" || exit 2
  export IPC_CONFORMANCE_SHARING_CHECKED="$checked"
  identical=$(grep -c '^[^#][^ ]* identical ' "$checked")
fi

# 4. All devices: the whole catalogue and the gate with `--jobs auto`, the
# gate serially, the two-device check, the whole catalogue serially.
two_rc=null two_s=null two_differ=0
jobs_json=""
if [ "$devices" -ge 2 ] && [ "$STEPS" != device0 ]; then
  c=$(est "${policy_s:-${shared_s:-90}}" 1.1)
  c=$((c + 30))
  maybe catalogue-jobs "$c" "$BIN" run --backend cuda --dialect all --jobs auto -q --out "$OUT/catalogue-jobs"
  all_jobs_rc=$rc all_jobs_s=$(run_s "$OUT/catalogue-jobs")
  maybe catalogue-serial "$c" "$BIN" run --backend cuda --dialect all -q --out "$OUT/catalogue-serial"
  all_serial_rc=$rc all_serial_s=$(run_s "$OUT/catalogue-serial")
  g=$(est "${gate_s:-25}" 1.3)
  maybe gate-jobs "$g" "$BIN" run --backend cuda --dialect all --filter "$gate" --jobs auto -q --out "$OUT/gate-jobs"
  gate_jobs_rc=$rc gate_jobs_s=$(run_s "$OUT/gate-jobs")
  maybe gate-serial "$g" "$BIN" run --backend cuda --dialect all --filter "$gate" -q --out "$OUT/gate-serial"
  gate_serial_rc=$rc gate_serial_s=$(run_s "$OUT/gate-serial")
  if [ -n "$two" ]; then
    maybe check-two-devices 60 "$BIN" run --check-sharing --backend cuda --dialect all --filter "$two" -q --out "$OUT/check-two-devices"
    two_rc=$rc two_s=$s
    two_differ=$(grep -c '^[^#][^ ]* differs ' "$OUT/check-two-devices/sharing-checked.txt" 2>/dev/null)
    # Device 0's results, then those of the clauses it did not compare.
    base="$OUT/check/sharing-checked.txt"
    [ -f "$base" ] || base="$checked"
    # STEPS=devices without SHARING_CHECKED has no device-0 results: the
    # two-device check's stand alone.
    [ -f "$base" ] || base="$OUT/check-two-devices/sharing-checked.txt"
    awk 'FNR == 1 { file++ }
         /^#/ || /^checked-on:/ { if (file == 1) print; next }
         file == 1 { seen[$1] = 1; print; next }
         !($1 in seen) { print }' "$base" "$OUT/check-two-devices/sharing-checked.txt" 2>/dev/null > "$checked.new" &&
      mv "$checked.new" "$checked"
    identical=$(grep -c '^[^#][^ ]* identical ' "$checked")
  fi
  jobs_identical=null
  if [ -f "$OUT/catalogue-jobs/results.json" ] && [ -f "$OUT/catalogue-serial/results.json" ]; then
    "$BIN" diff --tiers all "$OUT/catalogue-serial/results.json" "$OUT/catalogue-jobs/results.json" > "$OUT/catalogue-jobs-diff.log" 2>&1
    jobs_identical=$([ $? = 0 ] && echo true || echo false)
  elif [ -f "$OUT/gate-jobs/results.json" ] && [ -f "$OUT/gate-serial/results.json" ]; then
    "$BIN" diff --tiers all "$OUT/gate-serial/results.json" "$OUT/gate-jobs/results.json" > "$OUT/gate-jobs-diff.log" 2>&1
    jobs_identical=$([ $? = 0 ] && echo true || echo false)
  fi
  jobs_json="\"devices\": $devices,
  \"gate_jobs_auto_s\": ${gate_jobs_s:-null}, \"gate_jobs_auto_exit\": \"$gate_jobs_rc\",
  \"gate_serial_all_devices_s\": ${gate_serial_s:-null}, \"gate_serial_all_devices_exit\": \"$gate_serial_rc\",
  \"catalogue_jobs_auto_s\": ${all_jobs_s:-null}, \"catalogue_jobs_auto_exit\": \"$all_jobs_rc\",
  \"catalogue_serial_all_devices_s\": ${all_serial_s:-null}, \"catalogue_serial_all_devices_exit\": \"$all_serial_rc\",
  \"jobs_auto_verdicts_identical_to_serial\": $jobs_identical,"
fi

printf '| figure | value |\n| --- | --- |\n'
printf '| check over the whole catalogue, device 0 (wall s, exit) | %s (%s) |\n' "$check_s" "$check_rc"
printf '| whole catalogue on fresh workers, device 0 (s) | %s |\n' "${fresh_s:-?}"
printf '| clauses identical on fresh and reused workers / differing (two-device check: exit, differing) | %s / %s (%s, %s) |\n' "$identical" "$((${differ:-0} + ${two_differ:-0}))" "$two_rc" "${two_differ:-0}"
printf '| whole catalogue under the policy, device 0 (s, exit; %s) | %s (%s) |\n' "$policy_from" "${policy_s:-?}" "$policy_rc"
printf '| its verdicts and traces identical to the fresh run (diff --tiers all) | %s |\n' "$policy_identical"
printf '| gate under the policy, device 0 (s, exit) | %s (%s) |\n' "${gate_s:-?}" "$gate_rc"
if [ -n "$jobs_json" ]; then
  printf '| gate on %s devices, --jobs auto / serial (s) | %s / %s |\n' "$devices" "${gate_jobs_s:-?}" "${gate_serial_s:-?}"
  printf '| whole catalogue on %s devices, --jobs auto / serial (s) | %s / %s |\n' "$devices" "${all_jobs_s:-?}" "${all_serial_s:-?}"
  printf '| --jobs auto verdicts identical to serial | %s |\n' "$jobs_identical"
fi

cat > "$OUT/catalogue.json" <<JSON
{
  "budget_s": $BUDGET_S, "wall_s": $(($(date +%s) - begin)),
  "steps": "$STEPS",
  "check_s": $check_s, "check_exit": $check_rc,
  "catalogue_fresh_s": ${fresh_s:-null},
  "clauses_identical": ${identical:-null}, "clauses_differing": $((${differ:-0} + ${two_differ:-0})),
  "check_two_devices_s": $two_s, "check_two_devices_exit": "$two_rc",
  "catalogue_policy_s": ${policy_s:-null}, "catalogue_policy_exit": "$policy_rc", "catalogue_policy_run": "$policy_from",
  "catalogue_policy_identical_to_fresh": $policy_identical,
  $jobs_json
  "gate_policy_s": ${gate_s:-null}, "gate_policy_exit": "$gate_rc"
}
JSON
echo "catalogue: $OUT/catalogue.json; the policy's check results: $checked"
