"""Runs the warm-up evaluation of docs/warmup.md from the repository root:
    python3 docs/img/warmup_eval.py 10% > warmup-10.txt   (writes warmup-results-10.json;
    MANTLE and TRACES override target/release/mantle and ../shared/traces)
    python3 docs/img/warmup_chart.py warmup-results-10.json docs/img/warmup-hit-ratio.svg
Each strategy loads 100% of the cache (`--warmup STRATEGY:100%`). Prints a line per run and
the Markdown rows of docs/warmup.md's tables.
"""
import json, os, subprocess, sys
M = os.environ.get("MANTLE", "target/release/mantle")
T = os.environ.get("TRACES", "../shared/traces")
traces = [
  ("ParSplice WorkManager", f"{T}/parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst", []),
  ("CloudPhysics", f"{T}/libcachesim/cloudPhysicsIO.oracleGeneral.bin", ["--region","1MiB"]),
  ("Tencent CBS", f"{T}/tencent/tencent_cbs_cloud_storage-sample.bz2", []),
  ("ARC OLTP", f"{T}/arc/OLTP.lis.zst", []),
  ("ARC P3", f"{T}/arc/P3.lis.zst", []),
  ("MSR hm_0 sample", f"{T}/msr_cambridge/msr-cambridge1-sample.csv", []),
]
STRATEGIES = ["lastk", "firstk", "topk", "randomk"]
size = sys.argv[1] if len(sys.argv) > 1 else "10%"
k = "100%"
out = {}
for name, path, extra in traces:
    base = [M,"replay","--trace",path,"--cache-size",size,"--restart-at","50%","--json","--quiet"] + extra
    runs = {"on-demand": json.loads(subprocess.run(base, capture_output=True, text=True, check=True).stdout)}
    for s in STRATEGIES:
        r = subprocess.run(base + ["--warmup", f"{s}:{k}"], capture_output=True, text=True, check=True)
        runs[s] = json.loads(r.stdout)
    out[name] = {"k": k, "path": path, "extra": extra, "runs": runs}
json.dump(out, open(f"warmup-results-{size.strip('%')}.json","w"))

def n(v):
    return "never" if v is None else f"{v:,}"
def s(v):
    return "–" if v is None else f"{v:,.0f}"
def r3(v):
    return "–" if v is None else f"{v:.3f}"
def pct(v):
    return "–" if v is None else f"{100*v:+.0f}%"

for name, d in out.items():
    w = d["runs"]["on-demand"]["warmup"]
    print(f"## {name}: restart at {w['restart_at_request']}, {w['granularity']}, window {w['window_lookups']} lookups, warm hr {w['warm_hit_ratio_after_restart']:.4f}, on-demand conv {n(w['convergence_requests'])}/{n(w['convergence_requests_loose'])} ({s(w['convergence_seconds'])} s)")
    for st in STRATEGIES:
        w = d["runs"][st]["warmup"]
        print(f"  {st:8} loaded {w['loaded_objects']:7} conv {n(w['convergence_requests']):>9} loose {n(w['convergence_requests_loose']):>9} ({s(w['convergence_seconds'])} s) | od {n(w['ondemand_convergence_requests']):>9} loose {n(w['ondemand_convergence_requests_loose']):>9} ({s(w['ondemand_convergence_seconds'])} s) | reads {w['backend_reads_during_warmup']} (bulk {w['bulk_load_reads']}) od {w['ondemand_backend_reads_during_warmup']} | LR {r3(w['load_reduction'])} odLR {r3(w['ondemand_load_reduction'])} | time impr {pct(w['warmup_time_improvement'])} loose {pct(w['warmup_time_improvement_loose'])} LR impr {pct(w['load_reduction_improvement'])} | excess misses {w['excess_misses']} od {w['ondemand_excess_misses']}")

print("\n| trace | on-demand | " + " | ".join(STRATEGIES) + " |")
print("|---|---|" + "---|" * len(STRATEGIES))
for name, d in out.items():
    od = d["runs"]["on-demand"]["warmup"]
    cells = [f"{n(od['convergence_requests'])} / {n(od['convergence_requests_loose'])}"]
    for st in STRATEGIES:
        w = d["runs"][st]["warmup"]
        cells.append(f"{n(w['convergence_requests'])} / {n(w['convergence_requests_loose'])}; {pct(w['warmup_time_improvement'])}")
    print(f"| {name} | " + " | ".join(cells) + " |")
print("\n| trace | on-demand LR | " + " | ".join(STRATEGIES) + " |")
print("|---|---|" + "---|" * len(STRATEGIES))
for name, d in out.items():
    runs = d["runs"]
    od = runs["lastk"]["warmup"]
    cells = [r3(od["ondemand_load_reduction"])]
    for st in STRATEGIES:
        w = runs[st]["warmup"]
        cells.append(f"{r3(w['load_reduction'])} ({pct(w['load_reduction_improvement'])}); bulk {w['bulk_load_reads']:,}")
    print(f"| {name} | " + " | ".join(cells) + " |")
