#!/usr/bin/env bash
# Adaptive setup vs each candidate alone on the memory-miss plane (docs/adaptive.md).
# Usage: bench/adaptive_eval.sh [MANTLE_BINARY]  (default: target/release/mantle)
# Traces: a generated ParSplice-like run whose regime changes twice (written to $OUT), and the
# real ParSplice log from ../shared/traces when present (skipped with a message otherwise).
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
traces=("$OUT/regimes.csv" "$OUT/two-regimes.csv")
REAL=${MANTLE_SHARED_TRACES:-../shared/traces}/parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst
if [ -f "$REAL" ]; then traces+=("$REAL"); else echo "skipping the ParSplice log: $REAL is absent"; fi
P=policies
for trace in "${traces[@]}"; do
  for cost in ${COSTS:-0.1 0.01 0}; do
    echo "== $(basename "$trace"), switch cost=$cost"
    "$M" compare --trace "$trace" --no-baseline --json \
      --shadow $P/fixed.lua:n=100 --shadow $P/fixed.lua:n=1000 --shadow $P/fixed.lua:n=4000 \
      --shadow $P/multipolicy.lua --shadow $P/dscache.lua --shadow $P/dscache.lua:margin=1.1 \
      --shadow $P/decay.lua --switch $P/switch.lua --switch-param cost="$cost" \
      >"$OUT/compare.json"
    python3 - "$OUT/compare.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
print(f"{'setup':<36} {'misses':>8} {'miss ratio':>11} {'mean objects':>13}")
for r in runs:
    x = r["result"]
    print(f"{r['label']:<36} {x['misses']:>8} {x['miss_ratio']:>11.6f} {x['mean_cache_objects']:>13.1f}")
ad = runs[-1]["result"]
dom = [r["label"] for r in runs[:-1]
       if r["result"]["mean_cache_objects"] < ad["mean_cache_objects"] and r["result"]["misses"] <= ad["misses"]]
a = runs[-1]["adaptive"]
print("switches:", a["switches"], "| active:", ", ".join(f"{s['version']}@{s['from_tick']}" for s in a["timeline"][:8]),
      "..." if len(a["timeline"]) > 8 else "")
print("dominated by:", ", ".join(dom) if dom else "none")
PY
  done
done
