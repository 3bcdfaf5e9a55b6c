#!/usr/bin/env bash
# The performance figures of docs/performance.md in one run, as a table on
# stdout and benchmark.json under OUT:
#   - on a GPU (cuda): the whole catalogue and the gate, every figure of
#     tools/benchmark/catalogue.sh (under OUT/catalogue; its own time budget,
#     BUDGET_S): the sharing check over the whole catalogue, the catalogue on
#     fresh workers and under the worker policy with identical verdicts, the
#     gate, and on a host with several devices `--jobs auto` against serial;
#   - on the simulator: the gate (contract and relied-on clauses, every
#     dialect) under the worker policy and on fresh workers, whether their
#     verdicts are identical, `run --check-sharing` over the gate, the
#     whole catalogue's step time (best of 3) and explore cases/s per
#     dialect mix;
#   - explore cases/s over a fixed number of cases, on one thread and on
#     JOBS threads (default 2; `explore --jobs JOBS`, the threads sharing one
#     pool of workers), and on a GPU its findings rechecked on fresh workers.
# Usage: tools/benchmark/benchmark.sh [BIN] [sim|cuda] [OUT] [EXPLORE_CASES] [JOBS]
# EXPLORE_TIME_LIMIT_S (default 180) bounds each explore run. With
# IPC_CONFORMANCE_PROFILE=1 every log ends with where its run spent its time.
set -u
BIN=${1:-target/release/ipc-conformance}
BACKEND=${2:-sim}
OUT=${3:-reports/latest/benchmark}
CASES=${4:-300}
JOBS=${5:-2}
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "benchmark: no executable $BIN (cargo build --release -p ipc-conformance --features cuda)" >&2; exit 2; }

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# The value after "steps " in a run footer's "time:" line, in ms.
steps_ms() { grep '^time:' "$1" | sed 's/.*steps \([^,]*\),.*/\1/' | awk '
  /ms$/ { sub(/ ?ms$/, ""); print; exit }
  /s$/  { sub(/ ?s$/, ""); print $0 * 1000; exit }'; }

gate=$("$BIN" list 2>/dev/null | awk '$3 == "contract" || $3 == "relied-on" { print $1 }' | paste -sd, -)
[ -n "$gate" ] || { echo "benchmark: no contract or relied-on clause listed" >&2; exit 2; }

gate_json=""
identical=true sharing_ok=true
if [ "$BACKEND" = cuda ]; then
  # The whole catalogue and the gate (tools/benchmark/catalogue.sh).
  "$(dirname "$0")/catalogue.sh" "$BIN" "$OUT/catalogue" > "$OUT/catalogue.log" 2>&1
  catalogue_rc=$?
  gate_json="\"catalogue\": $(cat "$OUT/catalogue/catalogue.json" 2>/dev/null || echo null), \"catalogue_script_exit\": $catalogue_rc,"
  identical=$(grep -q '"catalogue_policy_identical_to_fresh": true' "$OUT/catalogue/catalogue.json" 2>/dev/null && echo true || echo false)
else
  t0=$(now)
  "$BIN" run --backend "$BACKEND" --dialect all --filter "$gate" --workers policy -q --out "$OUT/gate-policy" > "$OUT/gate-policy.log" 2>&1
  gate_policy_rc=$?
  t1=$(now)
  "$BIN" run --backend "$BACKEND" --dialect all --filter "$gate" --workers fresh -q --out "$OUT/gate-fresh" > "$OUT/gate-fresh.log" 2>&1
  gate_fresh_rc=$?
  t2=$(now)
  "$BIN" diff "$OUT/gate-fresh/results.json" "$OUT/gate-policy/results.json" > "$OUT/gate-diff.log" 2>&1
  gate_diff_rc=$?
  t3=$(now)
  "$BIN" run --check-sharing --backend "$BACKEND" --dialect all --filter "$gate" -q --out "$OUT/check-sharing" > "$OUT/check-sharing.log" 2>&1
  sharing_rc=$?
  t4=$(now)
  gate_policy_s=$(secs "$t0" "$t1")
  gate_fresh_s=$(secs "$t1" "$t2")
  sharing_s=$(secs "$t3" "$t4")
  identical=$([ "$gate_diff_rc" = 0 ] && echo true || echo false)
  sharing_ok=$([ "$sharing_rc" = 0 ] && echo true || echo false)
  gate_json="\"gate_policy_s\": $gate_policy_s, \"gate_policy_exit\": $gate_policy_rc,
  \"gate_fresh_s\": $gate_fresh_s, \"gate_fresh_exit\": $gate_fresh_rc,
  \"gate_verdicts_identical\": $identical,
  \"check_sharing_no_difference\": $sharing_ok, \"check_sharing_s\": $sharing_s,"
fi
dialect=all
"$BIN" explore --backend "$BACKEND" --cases "$CASES" --dialect "$dialect" --seed 11 -q --shrink-runs-real 0 --time-limit-s "${EXPLORE_TIME_LIMIT_S:-180}" --out "$OUT/explore" > "$OUT/explore.log" 2>&1
explore_rc=$?
explore_rate=$(grep -o '([0-9.]* cases/s' "$OUT/explore.log" | tr -d '(' | awk '{ print $1 }' | tail -1)
# The findings again on fresh workers (explore ran on reused ones where the
# policy allows): how many still differ, and how many agree now (worker
# history, not the scenario).
recheck_json=""
if [ "$BACKEND" != sim ] && ls "$OUT"/explore/*.ipc > /dev/null 2>&1; then
  "$BIN" explore recheck --backend "$BACKEND" --shrink-runs-real 0 -q --out "$OUT/explore-recheck" "$OUT"/explore/*.ipc > "$OUT/explore-recheck.log" 2>&1
  still=$(grep -c 'still differs' "$OUT/explore-recheck.log")
  agrees=$(grep -c 'agrees now' "$OUT/explore-recheck.log")
  recheck_json="\"explore_findings_still_differ_on_fresh_workers\": $still, \"explore_findings_agree_on_fresh_workers\": $agrees,"
fi
"$BIN" explore --backend "$BACKEND" --cases "$CASES" --dialect "$dialect" --seed 11 -q --shrink-runs-real 0 --time-limit-s "${EXPLORE_TIME_LIMIT_S:-180}" --jobs "$JOBS" --out "$OUT/explore-jobs" > "$OUT/explore-jobs.log" 2>&1
explore_jobs_rc=$?
explore_jobs_rate=$(grep -o '([0-9.]* cases/s' "$OUT/explore-jobs.log" | tr -d '(' | awk '{ print $1 }' | tail -1)
printf '| figure | value |\n| --- | --- |\n'
if [ "$BACKEND" = cuda ]; then
  grep "^|" "$OUT/catalogue.log" | tail -n +3
else
  printf '| gate, --workers policy (wall s, exit) | %s (%s) |\n' "$gate_policy_s" "$gate_policy_rc"
  printf '| gate, --workers fresh (wall s, exit) | %s (%s) |\n' "$gate_fresh_s" "$gate_fresh_rc"
  printf '| gate verdicts identical (diff exit 0) | %s |\n' "$identical"
  printf '| check-sharing over the gate: no difference (wall s) | %s (%s) |\n' "$sharing_ok" "$sharing_s"
fi
printf '| explore %s, %s cases: cases/s (exit) | %s (%s) |\n' "$BACKEND" "$CASES" "${explore_rate:-?}" "$explore_rc"
printf '| explore %s, %s cases, --jobs %s: cases/s (exit) | %s (%s) |\n' "$BACKEND" "$CASES" "$JOBS" "${explore_jobs_rate:-?}" "$explore_jobs_rc"
if [ -n "$recheck_json" ]; then
  printf '| explore findings on fresh workers: still differ, agree now | %s, %s |\n' "$still" "$agrees"
fi

sim_json=""
if [ "$BACKEND" = sim ]; then
  best=""
  for i in 1 2 3; do
    "$BIN" run --backend sim --dialect all -q --out "$OUT/catalogue-$i" > "$OUT/catalogue-$i.log" 2>&1
    ms=$(steps_ms "$OUT/catalogue-$i.log")
    best=$(awk -v a="${best:-$ms}" -v b="$ms" 'BEGIN { print (b < a ? b : a) }')
  done
  printf '| whole catalogue, three dialects, steps ms (best of 3) | %s |\n' "$best"
  sim_json="\"catalogue_steps_ms_best_of_3\": ${best:-null},"
  for mix in runtime driver hip all; do
    "$BIN" explore --backend sim --cases 20000 --dialect "$mix" --seed 11 -q --out "$OUT/explore-$mix" > "$OUT/explore-$mix.log" 2>&1
    rate=$(grep -o '([0-9.]* cases/s' "$OUT/explore-$mix.log" | tr -d '(' | awk '{ print $1 }' | tail -1)
    printf '| explore sim --dialect %s, 20000 cases: cases/s | %s |\n' "$mix" "${rate:-?}"
    sim_json="$sim_json \"explore_sim_${mix}_cases_per_s\": ${rate:-null},"
  done
fi

cat > "$OUT/benchmark.json" <<JSON
{
  "backend": "$BACKEND",
  $gate_json
  $sim_json
  $recheck_json
  "explore_cases": $CASES, "explore_cases_per_s": ${explore_rate:-null}, "explore_exit": $explore_rc,
  "explore_jobs": $JOBS, "explore_jobs_cases_per_s": ${explore_jobs_rate:-null}, "explore_jobs_exit": $explore_jobs_rc
}
JSON
echo "benchmark: $OUT/benchmark.json and the logs beside it"
[ "$identical" = true ] && [ "$sharing_ok" = true ]
