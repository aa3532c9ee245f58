#!/usr/bin/env bash
# Adaptive setup vs each candidate alone on the memory-miss plane (docs/adaptive.md).
# Usage: bench/adaptive_eval.sh [MANTLE_BINARY]  (default: target/release/mantle)
# Env: COSTS (memory weights, default "0.1 0.01 0"), REF (the memory unit, default 4000 objects,
# the largest fixed size), SWITCH (default policies/switch.lua), SWITCH_PARAMS (more K=V for the
# switch, e.g. "back=1"), FIXED_FIRST=1 (preference order below), OUT (work dir),
# MANTLE_SHARED_TRACES (default ../shared/traces), CHARTS (a directory: each run's memory-miss
# chart as TRACE-costC.svg).
# The objective, for the switch (cost=C, ref=REF) and for the verdict alike:
#   misses + C x lookups x mean objects / REF
# Traces (generated into $OUT, deterministic): ParSplice-like runs whose regime changes, working
# sets that alternate (mantle gen phases), the two-regimes trace, and the real ParSplice log
# from ../shared/traces when present (skipped with a message otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
M=${1:-target/release/mantle}
OUT=${OUT:-/tmp/mantle-adaptive-eval}
mkdir -p "$OUT"
# Three regimes of 20 minutes: the calibration run, a 4x hotter one, a slow-growing one.
"$M" gen parsplice --seed 1 --duration 20m -o "$OUT/a.csv" >/dev/null
"$M" gen parsplice --seed 2 --duration 20m --temperature 4 --start-time 1200 -o "$OUT/b.csv" >/dev/null
"$M" gen parsplice --seed 3 --duration 20m --growth-rate 0.1 --workers 8 --start-time 2400 -o "$OUT/c.csv" >/dev/null
{ cat "$OUT/a.csv"; tail -n +2 "$OUT/b.csv"; tail -n +2 "$OUT/c.csv"; } >"$OUT/regimes.csv"
# A sharper change: 20 hot keys for 300 s, then 2,000 (the trace of crates/cli/tests/replay_shadow.rs).
python3 - "$OUT/two-regimes.csv" <<'PY'
import sys
x, out = 12345, ["timestamp_s,op,key"]
for i in range(60000):
    x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    rng = 20 if i < 30000 else 2000
    out.append(f"{i // 100},GET,{1000 * (i >= 30000) + (x >> 33) % rng}")
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
# Working sets that alternate, new keys each time for the large ones: a small hot set (a small
# cache is enough; a large one holds dead keys) against a large working set (only a large cache
# serves it) and against a scan.
"$M" gen phases --seed 1 --rate 200 --repeat 5 --phase 120,50 --phase 120,3000,fresh \
  -o "$OUT/hot-large.csv" >/dev/null
"$M" gen phases --seed 2 --rate 200 --repeat 5 --phase 120,50,zipf=1 --phase 60,2500,scan,fresh \
  -o "$OUT/hot-scan.csv" >/dev/null
# ParSplice-like runs whose temperature alternates (1x, 8x) every 5 minutes.
: >"$OUT/temps.csv"
for i in 0 1 2 3; do
  "$M" gen parsplice --seed $((10 + i)) --duration 5m --temperature $((i % 2 ? 8 : 1)) \
    --start-time $((300 * i)) -o "$OUT/t$i.csv" >/dev/null
  if [ $i = 0 ]; then cat "$OUT/t$i.csv"; else tail -n +2 "$OUT/t$i.csv"; fi >>"$OUT/temps.csv"
done
traces=("$OUT/regimes.csv" "$OUT/temps.csv" "$OUT/hot-large.csv" "$OUT/hot-scan.csv" "$OUT/two-regimes.csv")
REAL=${MANTLE_SHARED_TRACES:-../shared/traces}/parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst
if [ -f "$REAL" ]; then traces+=("$REAL"); else echo "skipping the ParSplice log: $REAL is absent"; fi
P=policies
SWITCH=${SWITCH:-$P/switch.lua}
# The preference order: the first candidate manages the real cache until a challenger proves
# better, so the one to trust without evidence goes first: dscache, the shipped policy for
# ParSplice (FIXED_FIRST=1: the fixed sizes first, the order of the evaluation before
# 2026-11-23). $CANDIDATES is split into words on purpose.
if [ "${FIXED_FIRST:-0}" = 1 ]; then
  CANDIDATES="--shadow $P/fixed.lua:n=100 --shadow $P/fixed.lua:n=1000 --shadow $P/fixed.lua:n=4000
    --shadow $P/multipolicy.lua --shadow $P/dscache.lua --shadow $P/dscache.lua:margin=1.1 --shadow $P/decay.lua"
else
  CANDIDATES="--shadow $P/dscache.lua --shadow $P/dscache.lua:margin=1.1 --shadow $P/fixed.lua:n=100
    --shadow $P/fixed.lua:n=1000 --shadow $P/fixed.lua:n=4000 --shadow $P/multipolicy.lua --shadow $P/decay.lua"
fi
for trace in "${traces[@]}"; do
  for cost in ${COSTS:-0.1 0.01 0}; do
    echo "== $(basename "$trace"), switch cost=$cost ${SWITCH_PARAMS:-}"
    extra=()
    for kv in ${SWITCH_PARAMS:-}; do extra+=(--switch-param "$kv"); done
    if [ -n "${CHARTS:-}" ]; then extra+=(--charts "$OUT/charts"); fi
    "$M" compare --trace "$trace" --no-baseline --json \
      $CANDIDATES --switch "$SWITCH" --switch-param cost="$cost" --switch-param ref="${REF:-4000}" "${extra[@]}" \
      >"$OUT/compare.json"
    if [ -n "${CHARTS:-}" ]; then
      mkdir -p "$CHARTS"
      stem=$(basename "$trace"); stem=${stem%%[._]*}
      cp "$OUT/charts/memory_vs_miss_ratio.svg" "$CHARTS/$stem-cost$cost.svg"
    fi
    python3 - "$OUT/compare.json" "$cost" "${REF:-4000}" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
cost, ref = float(sys.argv[2]), float(sys.argv[3])
print(f"{'setup':<36} {'misses':>8} {'miss ratio':>11} {'mean objects':>13}")
for r in runs:
    x = r["result"]
    print(f"{r['label']:<36} {x['misses']:>8} {x['miss_ratio']:>11.6f} {x['mean_cache_objects']:>13.2f}")
ad = runs[-1]["result"]
dom = [r["label"] for r in runs[:-1]
       if r["result"]["mean_cache_objects"] < ad["mean_cache_objects"] and r["result"]["misses"] <= ad["misses"]]
a = runs[-1]["adaptive"]
print("switches:", a["switches"], "| active:", ", ".join(f"{s['version']}@{s['from_tick']}" for s in a["timeline"][:8]),
      "..." if len(a["timeline"]) > 8 else "")
print("dominated by:", ", ".join(dom) if dom else "none")
# "Beats": the switch's own objective on whole-run figures, misses + cost x lookups x mean
# size / ref (cost 0: fewest misses, then least memory).
def score(r):
    x = r["result"]
    return (x["misses"] + cost * (x["gets"] + x.get("accesses", 0)) * x["mean_cache_objects"] / ref,
            x["mean_cache_objects"])
best = min(runs[:-1], key=score)
s_ad, s_best = score(runs[-1]), score(best)
verdict = "beats it" if s_ad < s_best else ("ties" if s_ad == s_best else "does not beat it")
print(f"objective at cost {cost}: adaptive {s_ad[0]:.2f}, best single {best['label']} {s_best[0]:.2f}: {verdict}")
PY
  done
done
