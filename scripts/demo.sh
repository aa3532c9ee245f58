#!/usr/bin/env bash
# The ParSplice demo: installs what is missing, builds Mantle, generates a ParSplice-like
# key-value trace, analyses it, and replays it with no cache management, fixed LRU sizes,
# the multi-policy cache and the dynamically sized cache; writes an HTML comparison report.
#
#   scripts/demo.sh [OUTPUT_DIR]     (default: out/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/env.sh

out="${1:-out/demo}"
mkdir -p "$out"
echo "demo: building (release; the first build takes a while)" >&2
cargo build --release --workspace --locked

trace="$out/parsplice.csv.zst"
"$MANTLE" gen parsplice --seed 42 --duration 4h -o "$trace"
"$MANTLE" analyze --trace "$trace" --report "$out/analysis.html" | tee "$out/analysis.txt"
echo
"$MANTLE" compare --trace "$trace" \
  --fixed 1000 --fixed 4000 --fixed 10000 \
  --policy policies/multipolicy.lua:absorb=20000,n=1000 \
  --policy policies/dscache.lua \
  --report "$out/report.html"
echo
echo "demo: comparison report: $out/report.html"
echo "demo: workload analysis: $out/analysis.html"
