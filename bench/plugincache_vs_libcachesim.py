#!/usr/bin/env python3
"""mantle.PluginCache vs libCacheSim's PluginCache, the same Python hooks in both (run
through bench/plugincache_vs_libcachesim).

The hooks are crates/python/tests/plugin_hooks.py's (an OrderedDict LRU and FIFO, the shape
of libCacheSim's own plugin example), passed unchanged to both packages; the cache is 10% of
the trace's working set in bytes (bench/libcachesim/reference.json).

1. Whole traces: `mantle.PluginCache("NB", *hooks).process_trace(mantle.TraceReader(path))`
   against `lcs.PluginCache(N, *hooks).process_trace(lcs.TraceReader(path))`, each timed
   from the cache's construction to the returned ratios; misses must be equal.
2. Per request: a Python loop of `cache.get` over the first 1M requests held in Python
   lists: mantle's `get(key, size)` against libCacheSim's `get(req)` on one reused
   `lcs.Request` (its cheapest use).

Rounds alternate between the packages; best and median of `--rounds` are printed (M
requests/s of CPU time: both run on the calling thread), and the ratio by wall time.
"""

import argparse
import json
import os
import statistics
import sys

import libcachesim as lcs

import mantle

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "crates", "python", "tests"))
import plugin_hooks as hooks  # noqa: E402
from python_vs_libcachesim import timed, to_oracle_general  # noqa: E402

HOOKS = {"lru": hooks.LRU, "fifo": hooks.FIFO}


def rate(n, times):
    return n / min(times) / 1e6, n / statistics.median(times) / 1e6


def whole_trace(path, alg, cache_bytes, rounds):
    def theirs():
        return lcs.PluginCache(cache_bytes, *HOOKS[alg]).process_trace(
            lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE))

    def ours():
        return mantle.PluginCache(f"{cache_bytes}B", *HOOKS[alg]).process_trace(mantle.TraceReader(path))

    return alternate(theirs, ours, rounds)


def alternate(theirs, ours, rounds):
    a, b, wa, wb = [], [], [], []
    for _ in range(rounds):
        t, w, lcs_out = timed(theirs)
        a.append(t)
        wa.append(w)
        t, w, mantle_out = timed(ours)
        b.append(t)
        wb.append(w)
    return a, b, min(wa) / min(wb), lcs_out, mantle_out


def per_request(path, alg, cache_bytes, rounds, limit):
    reqs = list(mantle.TraceReader(path))[:limit]
    keys = [r[1] for r in reqs]
    sizes = [r[2] for r in reqs]

    def ours():
        get = mantle.PluginCache(f"{cache_bytes}B", *HOOKS[alg]).get
        return sum(1 for k, s in zip(keys, sizes) if not get(k, s))

    def theirs():
        get = lcs.PluginCache(cache_bytes, *HOOKS[alg]).get
        req = lcs.Request()
        misses = 0
        for k, s in zip(keys, sizes):
            req.obj_id = k
            req.obj_size = s
            if not get(req):
                misses += 1
        return misses

    return len(keys), alternate(theirs, ours, rounds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--algorithms", default="lru,fifo")
    default = next((d for d in (os.path.join(REPO, "..", "shared", "traces"),
                                os.path.join(REPO, "..", "..", "shared", "traces")) if os.path.isdir(d)),
                   os.path.join(REPO, "..", "shared", "traces"))
    ap.add_argument("--traces", default=default)
    ap.add_argument("--per-request-limit", type=int, default=1_000_000)
    args = ap.parse_args()
    if not os.path.isdir(args.traces):
        sys.exit(f"bench: traces folder {args.traces} is absent; nothing to measure")
    with open(os.path.join(HERE, "libcachesim", "reference.json")) as f:
        ref = json.load(f)
    lib = os.path.join(args.traces, "libcachesim")
    twitter_bin = os.path.join(HERE, "work", "twitter_cluster52.oracleGeneral.bin")
    to_oracle_general(os.path.join(lib, "twitter_cluster52.csv"), twitter_bin)
    cases = [
        ("cloudPhysicsIO.oracleGeneral.bin", os.path.join(lib, "cloudPhysicsIO.oracleGeneral.bin"),
         "cloudPhysicsIO.oracleGeneral.bin"),
        ("twitter_cluster52 as oracleGeneral", twitter_bin, "twitter_cluster52.csv"),
    ]
    requests = {t["trace"]: t["requests"] for t in ref["traces"]}

    def cache_bytes(ref_name):
        return next(r["cache_bytes"] for r in ref["results"]
                    if r["trace"] == ref_name and r["algorithm"] == "lru" and r["fraction"] == 0.1)

    print(f"## PluginCache.process_trace, same Python hooks: libcachesim {lcs.__version__}, "
          f"{args.rounds} alternating rounds, cache = 10% of working-set bytes, "
          "M requests/s of CPU time, best (median)")
    print("| trace | hooks | libCacheSim | mantle | mantle / libCacheSim | (wall) | miss ratio (both) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, path, ref_name in cases:
        for alg in args.algorithms.split(","):
            a, b, wall, theirs, ours = whole_trace(path, alg, cache_bytes(ref_name), args.rounds)
            n = requests[ref_name]
            if round(theirs[0] * n) != round(ours[0] * n):
                print(f"MISMATCH {label} {alg}: libCacheSim {theirs} mantle {ours}")
            (l, lm), (m, mm) = rate(n, a), rate(n, b)
            print(f"| {label} | {alg} | {l:.3f} ({lm:.3f}) | {m:.3f} ({mm:.3f}) | {m / l:.2f}x "
                  f"| {wall:.2f}x | {ours[0]:.6f} |")
            sys.stdout.flush()
    print()
    print(f"## PluginCache.get per request from a Python loop, {args.rounds} alternating rounds, "
          "M requests/s of CPU time, best (median)")
    print("| trace | hooks | libCacheSim get(req) | mantle get(key, size) | mantle / libCacheSim | (wall) | misses (lcs / mantle) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    n, (a, b, wall, lm, mm) = per_request(twitter_bin, "lru", cache_bytes("twitter_cluster52.csv"),
                                          args.rounds, args.per_request_limit)
    (l, lmed), (m, mmed) = rate(n, a), rate(n, b)
    print(f"| twitter_cluster52.oracleGeneral.bin ({n} requests) | lru | {l:.3f} ({lmed:.3f}) "
          f"| {m:.3f} ({mmed:.3f}) | {m / l:.2f}x | {wall:.2f}x | {lm} / {mm} |")


if __name__ == "__main__":
    main()
