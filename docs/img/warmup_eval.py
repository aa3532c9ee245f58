"""Runs the warm-up evaluation of docs/warmup.md from the repository root:
    python3 docs/img/warmup_eval.py 10% > warmup-10.txt   (writes warmup-results-10.json)
    python3 docs/img/warmup_chart.py warmup-results-10.json docs/img/warmup-hit-ratio.svg
"""
import json, os, subprocess, sys
M = os.environ.get("MANTLE", "target/release/mantle")
T = "../shared/traces"
traces = [
  ("ParSplice WorkManager", f"{T}/parsplice/scale-workers-1-71538_rank4_workmanager_getput.csv.zst", []),
  ("CloudPhysics", f"{T}/libcachesim/cloudPhysicsIO.oracleGeneral.bin", ["--region","1MiB"]),
  ("Tencent CBS", f"{T}/tencent/tencent_cbs_cloud_storage-sample.bz2", []),
  ("ARC OLTP", f"{T}/arc/OLTP.lis.zst", []),
  ("ARC P3", f"{T}/arc/P3.lis.zst", []),
  ("MSR hm_0 sample", f"{T}/msr_cambridge/msr-cambridge1-sample.csv", []),
]
size = sys.argv[1] if len(sys.argv) > 1 else "10%"
out = {}
for name, path, extra in traces:
    base = [M,"replay","--trace",path,"--cache-size",size,"--restart-at","50%","--json","--quiet"] + extra
    cold = json.loads(subprocess.run(base, capture_output=True, text=True, check=True).stdout)
    w = cold["warmup"]
    if w["granularity"] == "keys":
        k = cold["capacity_objects"] or max(1, cold["capacity_bytes"] * cold["working_set"]["objects"] // max(1, cold["working_set"]["bytes"]))
    else:
        k = max(1, (cold["capacity_bytes"] or 0) // w["region_bytes"])
    runs = {"on-demand": cold}
    for s in ["lastk","firstk","topk","randomk"]:
        r = subprocess.run(base + ["--warmup", f"{s}:{k}"], capture_output=True, text=True, check=True)
        runs[s] = json.loads(r.stdout)
    out[name] = {"k": k, "path": path, "extra": extra, "runs": runs}
json.dump(out, open(f"warmup-results-{size.strip('%')}.json","w"))
def f(v, pct=False):
    if v is None: return "never" if not pct else "n/a"
    return f"{100*v:.0f}%" if pct else str(v)
for name, d in out.items():
    c = d["runs"]["on-demand"]; w = c["warmup"]
    print(f"## {name}: restart at {w['restart_at_request']}, K={d['k']} {w['granularity']}, window {w['window_lookups']} lookups, warm hr {w['warm_hit_ratio_after_restart']:.4f}, on-demand conv {f(w['convergence_requests'])}/{f(w['convergence_requests_loose'])}")
    for s in ["lastk","firstk","topk","randomk"]:
        w = d["runs"][s]["warmup"]
        print(f"  {s:8} loaded {w['loaded_objects']:7} conv {f(w['convergence_requests']):>7} loose {f(w['convergence_requests_loose']):>7} | od {f(w['ondemand_convergence_requests']):>7} loose {f(w['ondemand_convergence_requests_loose']):>7} | reads {w['backend_reads_during_warmup']:6} (bulk {w['bulk_load_reads']}) od {w['ondemand_backend_reads_during_warmup']:6} | LR {w['load_reduction'] if w['load_reduction'] is None else round(w['load_reduction'],3)} odLR {w['ondemand_load_reduction'] if w['ondemand_load_reduction'] is None else round(w['ondemand_load_reduction'],3)} | time impr {f(w['warmup_time_improvement'],1)} LR impr {f(w['load_reduction_improvement'],1)} | hr after {w['hit_ratio_after_restart']:.4f} od {w['ondemand_hit_ratio_after_restart']:.4f}")
