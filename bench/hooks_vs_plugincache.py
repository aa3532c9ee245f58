"""Per-request hooks: Mantle's Lua-hook LRU (policies/hooks/lru.lua under `mantle replay`)
against libCacheSim 0.3.5's Python `PluginCache` LRU (an OrderedDict behind the hit, miss,
eviction and remove hooks, as libCacheSim's README writes it), on the same generated
oracleGeneral trace and byte capacity. Prints requests per second of both, their ratio, and
the miss ratios (which must be equal: both are LRU; the built-in `--eviction lru` is shown
too). The mantle figure is replay's own `requests_per_second` (trace reading included), the
libCacheSim one is `process_trace`'s wall time.

    python3 bench/hooks_vs_plugincache.py MANTLE_BINARY [--requests N] [--objects N] [--rounds N]
"""

import argparse
import json
import os
import random
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict

import libcachesim as lcs


def write_trace(path, requests, objects, seed=7):
    """Zipf(0.9)-popular objects with sizes 100..10,099 bytes, as oracleGeneral records, 10,000
    requests a second (replay runs the policy's tick callbacks once a trace second)."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** 0.9 for i in range(objects)]
    keys = rng.choices(range(objects), weights=weights, k=requests)
    with open(path, "wb") as out:
        for t, k in enumerate(keys):
            out.write(struct.pack("<IQIq", t // 10_000, k, 100 + (k * 7919) % 10_000, -1))


class PyLru:
    def __init__(self):
        self.data = OrderedDict()

    def hit(self, obj_id):
        self.data.move_to_end(obj_id)

    def miss(self, obj_id, size):
        self.data[obj_id] = size

    def evict(self):
        obj_id, _ = self.data.popitem(last=False)
        return obj_id

    def remove(self, obj_id):
        self.data.pop(obj_id, None)


def plugin_lru(cache_bytes):
    return lcs.PluginCache(
        cache_size=cache_bytes,
        cache_init_hook=lambda params: PyLru(),
        cache_hit_hook=lambda c, req: c.hit(req.obj_id),
        cache_miss_hook=lambda c, req: c.miss(req.obj_id, req.obj_size),
        cache_eviction_hook=lambda c, req: c.evict(),
        cache_remove_hook=lambda c, obj_id: c.remove(obj_id),
        cache_free_hook=lambda c: None,
        cache_name="PyLRU",
    )


def run_plugin(path, cache_bytes):
    """(wall seconds, CPU seconds, miss ratio) of process_trace."""
    reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = plugin_lru(cache_bytes)
    start, cpu = time.perf_counter(), time.process_time()
    miss_ratio, _ = cache.process_trace(reader)
    return time.perf_counter() - start, time.process_time() - cpu, miss_ratio


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_mantle(binary, path, cache_bytes, policy):
    args = [binary, "replay", "--trace", path, "--cache-size", f"{cache_bytes}B",
            "--backend", "none", "--json", "--quiet"]
    if policy:
        args += ["--policy", policy]
    cpu = child_cpu()
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    cpu = child_cpu() - cpu
    report = json.loads(out.stdout)
    if report.get("hook_failure"):
        sys.exit(f"mantle: the hooks failed: {report['hook_failure']}")
    # The process's CPU time includes start-up and reading the trace.
    return report["wall_seconds"], cpu, report["miss_ratio"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mantle")
    ap.add_argument("--requests", type=int, default=2_000_000)
    ap.add_argument("--objects", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "zipf.oracleGeneral.bin")
        write_trace(path, a.requests, a.objects)
        # 10% of the bytes of the distinct objects.
        cache_bytes = sum(100 + (k * 7919) % 10_000 for k in range(a.objects)) // 10
        # The same LRU with arithmetic in its hook, so that each request runs the Lua VM:
        # lru.lua's `return obj.last_access` is read by the host without a call (a projection
        # hook, docs/policy-language.md), and this line shows what a hook call costs.
        vm_policy = os.path.join(tmp, "lru_vm.lua")
        with open(vm_policy, "w") as out:
            out.write("function priority(obj) return obj.last_access + 0 end\n")
        runs = {"plugin": [], "hooks": [], "vm": [], "builtin": []}
        for _ in range(a.rounds):
            wall, cpu, plugin_mr = run_plugin(path, cache_bytes)
            runs["plugin"].append((wall, cpu))
            wall, cpu, hooks_mr = run_mantle(a.mantle, path, cache_bytes, "policies/hooks/lru.lua")
            runs["hooks"].append((wall, cpu))
            wall, cpu, vm_mr = run_mantle(a.mantle, path, cache_bytes, vm_policy)
            runs["vm"].append((wall, cpu))
            wall, cpu, builtin_mr = run_mantle(a.mantle, path, cache_bytes, None)
            runs["builtin"].append((wall, cpu))
        n = a.requests

        def rates(name):
            wall = n / statistics.median(w for w, _ in runs[name]) / 1e6
            cpu = n / statistics.median(c for _, c in runs[name]) / 1e6
            return wall, cpu

        print(f"trace: {n:,} requests, {a.objects:,} objects (Zipf 0.9), "
              f"cache {cache_bytes:,} B; median of {a.rounds} rounds; M req/s by wall time "
              f"and by CPU time")
        for name, label, mr in [
            ("plugin", "libCacheSim PluginCache LRU (Python hooks)  ", plugin_mr),
            ("hooks", "mantle Lua-hook LRU (policies/hooks/lru.lua)", hooks_mr),
            ("vm", "mantle Lua-hook LRU run by the VM (+ 0)     ", vm_mr),
            ("builtin", "mantle built-in LRU                         ", builtin_mr),
        ]:
            wall, cpu = rates(name)
            print(f"{label} {wall:7.3f} wall {cpu:7.3f} cpu  miss ratio {mr:.6f}")
        (hw, hc), (pw, pc) = rates("hooks"), rates("plugin")
        print(f"ratio hooks / PluginCache: {hw / pw:.1f}x by wall time, {hc / pc:.1f}x by CPU "
              f"time (goal >= 10x)")
        (vw, vc) = rates("vm")
        print(f"ratio hooks run by the VM / PluginCache: {vw / pw:.1f}x by wall time, "
              f"{vc / pc:.1f}x by CPU time")
        if any(abs(plugin_mr - mr) > 1e-12 for mr in (hooks_mr, vm_mr, builtin_mr)):
            sys.exit("miss ratios differ")

if __name__ == "__main__":
    main()
