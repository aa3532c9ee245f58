"""Draws docs/img/warmup-hit-ratio.svg from warmup_eval.py results. Needs matplotlib
(Debian: apt-get install python3-matplotlib; or pip install matplotlib)."""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
res = json.load(open(sys.argv[1]))
names = ["CloudPhysics", "Tencent CBS", "ARC OLTP", "ARC P3"]
fig, axes = plt.subplots(2, 2, figsize=(11, 7))
styles = {"lastk": "-", "firstk": "--", "topk": "-.", "randomk": ":"}
for ax, name in zip(axes.flat, names):
    d = res[name]
    runs = d["runs"]
    cold = runs["on-demand"]["warmup"]["windows"]
    horizon = max(3 * (runs["on-demand"]["warmup"]["convergence_requests"] or 0), 1) 
    horizon = max(horizon, cold[min(len(cold) - 1, 20)]["requests"])
    keep = lambda ws: [w for w in ws if w["requests"] <= horizon]
    xs = [w["requests"] for w in keep(cold)]
    ax.plot(xs, [w["warm_hit_ratio"] for w in keep(cold)], color="black", lw=2, label="always-warm")
    ax.plot(xs, [w["hit_ratio"] for w in keep(cold)], color="grey", lw=2, label="on-demand (cold)")
    for s, ls in styles.items():
        ws = keep(runs[s]["warmup"]["windows"])
        ax.plot([w["requests"] for w in ws], [w["hit_ratio"] for w in ws], ls, label=s)
    w = runs["on-demand"]["warmup"]
    ax.set_title(f"{name}: K={d['k']} of the cache, restart at request {w['restart_at_request']:,}, {w['window_lookups']} lookups/window", fontsize=9)
    ax.set_xlabel("requests since the restart")
    ax.set_ylabel("hit ratio per window")
    ax.grid(alpha=0.3)
axes[0][0].legend(fontsize=7)
fig.suptitle("Hit ratio after a restart at 50% of the trace, LRU at 10% of the working set (1 MiB regions)")
fig.tight_layout()
fig.savefig(sys.argv[2])
