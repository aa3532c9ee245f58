#!/usr/bin/env bash
# Evaluates the dynamically sized caches against the smallest fixed LRU cache that has no
# reuse misses, on the real ParSplice log (when ../shared/traces is present) and on generated
# ParSplice traces under five initial conditions. No policy gets a parameter. Prints one
# markdown table (docs/reproduce-parsplice.md shows it) and writes each trace's comparison
# report and charts (memory against miss ratio among them) under OUT/<trace>/.
#
#   scripts/eval-sizing.sh [OUT]     (default: out/sizing; needs jq and a release build)
#
# The real log is looked for in $TRACES (default ../shared/traces, beside the clone).
#
# "Dominated" answers: is there a fixed LRU size with no more misses and no larger mean than
# multipolicy2.lua? An LRU cache's misses never grow with its size and its mean occupancy
# never shrinks, so it is enough to find, by bisection, the smallest size with no more
# misses and compare its mean.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
command -v jq >/dev/null || { echo "eval-sizing: needs jq (scripts/setup.sh installs it)" >&2; exit 1; }
[ -x "$MANTLE" ] || { echo "eval-sizing: build first: cargo build --release -p mantle-cli" >&2; exit 1; }

out="${1:-out/sizing}"
mkdir -p "$out"
real=${TRACES:-../shared/traces}/parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst

traces=()
if [ -f "$real" ]; then traces+=("real-log:$real"); fi
gen() { # name, generator options
  local name=$1; shift
  local file="$out/$name.csv.zst"
  [ -f "$file" ] || "$MANTLE" gen parsplice --seed 3 "$@" -o "$file" >/dev/null
  traces+=("$name:$file")
}
gen calibration --duration 2h
gen workers-112 --duration 2h --workers 112
gen growth-0.1 --duration 2h --growth-rate 0.1
gen workers-56-temp-2 --duration 2h --workers 56 --temperature 2
gen duration-4h --duration 4h

replay_fixed() { # trace, size -> "misses mean"
  "$MANTLE" replay --trace "$1" --cache-size "$2" --tick 1s --json 2>/dev/null |
    jq -r '"\(.misses) \(.mean_cache_objects)"'
}

# Smallest fixed LRU size with at most $2 misses (sizes 1..$3, where $3 has none).
smallest_with_misses() {
  local trace=$1 budget=$2 lo=1 hi=$3
  while [ "$lo" -lt "$hi" ]; do
    local mid=$(((lo + hi) / 2))
    read -r misses _ < <(replay_fixed "$trace" "$mid")
    if [ "$misses" -le "$budget" ]; then hi=$mid; else lo=$((mid + 1)); fi
  done
  echo "$lo"
}

pct() { awk -v x="$1" 'BEGIN { printf "%.4f%%", 100 * x }'; }
num() { awk -v x="$1" 'BEGIN { printf "%.1f", x }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3fx", a / b }'; }

echo "| trace | no-miss LRU (mean) | dscache.lua miss / mean / ratio | dscache2.lua miss / mean / ratio | multipolicy2.lua miss / mean | smallest LRU with no more misses (mean) | multipolicy2 dominated |"
echo "|---|---|---|---|---|---|---|"
for entry in "${traces[@]}"; do
  name=${entry%%:*}
  trace=${entry#*:}
  nomiss=$("$MANTLE" analyze --trace "$trace" --json | jq -r '.mrc.no_miss_size')
  fixed=()
  for f in 8 4 2; do fixed+=(--fixed $((nomiss / f > 0 ? nomiss / f : 1))); done
  json=$("$MANTLE" compare --trace "$trace" --no-baseline --fixed "$nomiss" "${fixed[@]}" \
    --policy policies/dscache.lua --policy policies/dscache2.lua \
    --policy policies/multipolicy2.lua \
    --report "$out/$name/report.html" --charts "$out/$name" --json 2>/dev/null)
  run() { jq -r --arg l "$1" ".runs[] | select(.label == \$l) | .result | .$2" <<<"$json"; }
  lru_mean=$(run "lru $nomiss" mean_cache_objects)
  ds_miss=$(run dscache.lua miss_ratio); ds_mean=$(run dscache.lua mean_cache_objects)
  d2_miss=$(run dscache2.lua miss_ratio); d2_mean=$(run dscache2.lua mean_cache_objects)
  mp_miss=$(run multipolicy2.lua miss_ratio); mp_mean=$(run multipolicy2.lua mean_cache_objects)
  mp_misses=$(run multipolicy2.lua misses)
  best=$(smallest_with_misses "$trace" "$mp_misses" "$nomiss")
  read -r _ best_mean < <(replay_fixed "$trace" "$best")
  dominated=$(awk -v a="$best_mean" -v b="$mp_mean" 'BEGIN { print (a <= b ? "yes" : "no") }')
  echo "| $name | $nomiss ($(num "$lru_mean")) | $(pct "$ds_miss") / $(num "$ds_mean") / $(ratio "$ds_mean" "$lru_mean") | $(pct "$d2_miss") / $(num "$d2_mean") / $(ratio "$d2_mean" "$lru_mean") | $(pct "$mp_miss") / $(num "$mp_mean") | $best ($(num "$best_mean")) | $dominated |"
done
