#!/usr/bin/env python3
"""Records what libCacheSim 0.3.5's `PluginCache` and `PluginAdmissioner` do with the hooks
of crates/python/tests/plugin_hooks.py, for crates/python/tests/test_plugin_cache.py (CI has
no libcachesim; the test compares mantle against these pinned figures).

For every case of plugin_hooks.CASES (a generated oracleGeneral trace, a byte capacity):
misses and hits of the LRU and FIFO hooks in `PluginCache`, of the LRU hooks behind the
size admissioner, and of libCacheSim's built-in LRU behind the same admissioner; and the
sequence of hook calls of plugin_hooks.EVENT_REQUESTS. Writes
crates/python/tests/libcachesim_plugincache.json.

    ~/.cache/lcs-venv/bin/python bench/libcachesim/plugincache_reference.py
"""

import json
import os
import sys
import tempfile

import libcachesim as lcs

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TESTS = os.path.join(REPO, "crates", "python", "tests")
sys.path.insert(0, TESTS)
import plugin_hooks as hooks  # noqa: E402


def admissioner():
    """The size admissioner, and the state its init hook made (to read its counters)."""
    seen = []

    def init():
        seen.append(hooks.admit_init())
        return seen[0]

    adm = lcs.PluginAdmissioner("small", init, hooks.admit_small, hooks.admit_clone,
                                hooks.admit_update, hooks.admit_free)
    return adm, seen[0]


def counts(cache, path):
    """Requests, misses and the final state of a whole trace through `cache`, by
    libCacheSim's c_process_trace (its own loop, as its users run a trace); the miss ratio
    is turned back into a count."""
    reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
    n = reader.get_num_of_req()
    mr, bmr = cache.process_trace(reader)
    return {"requests": n, "misses": round(mr * n), "miss_ratio": mr, "byte_miss_ratio": bmr,
            "objects": cache.get_n_obj(), "bytes": cache.get_occupied_byte()}


def counts_per_request(cache, path):
    """`counts` by a Python loop of `cache.get(req)`: libCacheSim 0.3.5's process_trace
    crashes (SIGSEGV) with a PluginAdmissioner, whose admit hook it calls with the GIL
    released; from Python the GIL is held."""
    reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
    n = misses = req_bytes = miss_bytes = 0
    for req in reader:
        n += 1
        req_bytes += req.obj_size
        if not cache.get(req):
            misses += 1
            miss_bytes += req.obj_size
    return {"requests": n, "misses": misses, "miss_ratio": misses / n,
            "byte_miss_ratio": miss_bytes / req_bytes,
            "objects": cache.get_n_obj(), "bytes": cache.get_occupied_byte()}


def main():
    out = {"libcachesim": lcs.__version__, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, trace_kwargs, cache_bytes in hooks.CASES:
            path = hooks.write_trace(os.path.join(tmp, f"{name}.oracleGeneral.bin"), **trace_kwargs)
            case = {"name": name, "trace": trace_kwargs, "cache_bytes": cache_bytes}
            case["lru"] = counts(lcs.PluginCache(cache_bytes, *hooks.LRU), path)
            case["fifo"] = counts(lcs.PluginCache(cache_bytes, *hooks.FIFO), path)
            adm, seen = admissioner()
            case["lru_admitted"] = counts_per_request(
                lcs.PluginCache(cache_bytes, *hooks.LRU_ADMITTED, admissioner=adm), path)
            case["lru_admitted"].update(asked=seen.asked, updates=seen.updates)
            adm, seen = admissioner()
            case["builtin_lru_admitted"] = counts_per_request(
                lcs.LRU(cache_bytes, admissioner=adm), path)
            case["builtin_lru_admitted"].update(asked=seen.asked, updates=seen.updates)
            out["cases"].append(case)
            print(name, {k: v["misses"] for k, v in case.items() if isinstance(v, dict) and "misses" in v})

    log = []
    cache_hooks, adm_hooks = hooks.event_hooks(log)
    # Kept referenced: libCacheSim's cache does not hold the Python admissioner, and one
    # collected under it crashes the next admit call.
    adm = lcs.PluginAdmissioner("events", *adm_hooks)
    cache = lcs.PluginCache(10, *cache_hooks, admissioner=adm)
    hits = [cache.get(lcs.Request(obj_size=size, obj_id=obj)) for obj, size in hooks.EVENT_REQUESTS]
    removed = [cache.remove(obj) for obj in hooks.EVENT_REMOVES]
    log.append(["state", cache.get_n_obj(), cache.get_occupied_byte()])
    out["events"] = {"hits": hits, "removed": removed, "log": log}

    target = os.path.join(TESTS, "libcachesim_plugincache.json")
    with open(target, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", os.path.relpath(target, REPO), flush=True)
    # libCacheSim 0.3.5 crashes (SIGSEGV) freeing a plugin cache that has a plugin
    # admissioner; the figures are written, so leave without freeing anything.
    os._exit(0)


if __name__ == "__main__":
    main()
