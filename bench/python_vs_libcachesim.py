#!/usr/bin/env python3
"""mantle vs libCacheSim from Python (run through bench/python_vs_libcachesim).

1. Whole traces: `mantle.Cache(alg, "NB").process_trace(mantle.TraceReader(path))` against
   `lcs.<Alg>(N).process_trace(lcs.TraceReader(path))`, same algorithm and byte capacity (10% of
   the working set, from bench/libcachesim/reference.json), each timed from reader construction
   to the returned ratios; miss ratios must be equal. libCacheSim runs with its default hash
   table (2^24 slots) and with one sized to the trace; the ratio is against the faster.
2. Per request: a Python loop calling `cache.get` once per request of a trace held in Python
   lists: mantle's `get(key, size)` against libCacheSim's `get(req)` on one reused `Request`
   (its fields set per request, the cheapest way its API allows).

Runs alternate between the packages; best and median of `--rounds` are printed (M requests/s)
of CPU time (`time.process_time`; both run on the calling thread), which a machine shared
with other jobs inflates far less than wall time; the last column is the ratio by wall time.
"""

import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import libcachesim as lcs

import mantle

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LCS = {"lru": lcs.LRU, "fifo": lcs.FIFO, "clock": lcs.Clock, "sieve": lcs.Sieve, "s3fifo": lcs.S3FIFO}


def lcs_reader(path):
    if path.endswith(".oracleGeneral.bin"):
        return lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
    params = lcs.ReaderInitParam(has_header=True, has_header_set=True, delimiter=",",
                                 obj_id_is_num=True, obj_id_is_num_set=True)
    params.time_field, params.obj_id_field, params.obj_size_field = 1, 2, 3
    return lcs.TraceReader(path, lcs.TraceType.CSV_TRACE, params)


def mantle_reader(path):
    if path.endswith(".csv"):
        return mantle.TraceReader(path, "csv", csv="time-col=1,obj-id-col=2,obj-size-col=3,has-header=true")
    return mantle.TraceReader(path)


def timed(f):
    """(CPU seconds, wall seconds, f())."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = f()
    return time.process_time() - cpu, time.perf_counter() - wall, out


def time_lcs(path, alg, cache_bytes, hashpower):
    return timed(lambda: LCS[alg](cache_bytes, hashpower=hashpower).process_trace(lcs_reader(path)))


def time_mantle(path, alg, cache_bytes):
    return timed(lambda: mantle.Cache(alg, f"{cache_bytes}B").process_trace(mantle_reader(path)))


def to_oracle_general(csv_path, out_path):
    if os.path.exists(out_path):
        return
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(csv_path) as src, open(out_path + ".tmp", "wb") as dst:
        next(src)
        for line in src:
            t, obj, size, _ = line.split(",")
            dst.write(struct.pack("<IQIq", int(t), int(obj), int(size), -1))
    os.replace(out_path + ".tmp", out_path)


def rate(n, times):
    return n / min(times) / 1e6, n / statistics.median(times) / 1e6


def whole_traces(cases, ref, traces, algorithms, rounds):
    print(f"## process_trace: libcachesim {lcs.__version__}, {rounds} alternating rounds, "
          "cache = 10% of working-set bytes, M requests/s of CPU time, best (median)")
    print("| trace | alg | libCacheSim default | libCacheSim sized | mantle | mantle / best peer | (wall) | miss ratio (both) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label, path, ref_name in cases:
        meta = traces[ref_name]
        hashpower = max(16, math.ceil(math.log2(meta["working_set_objects"])) + 1)
        for alg in algorithms:
            cache_bytes = next(r["cache_bytes"] for r in ref["results"]
                               if r["trace"] == ref_name and r["algorithm"] == alg and r["fraction"] == 0.1)
            default, sized, ours, walls = [], [], [], {"d": [], "s": [], "m": []}
            for _ in range(rounds):
                t, w, theirs_mr = time_lcs(path, alg, cache_bytes, 24)
                default.append(t)
                walls["d"].append(w)
                t, w, _ = time_lcs(path, alg, cache_bytes, hashpower)
                sized.append(t)
                walls["s"].append(w)
                t, w, ours_mr = time_mantle(path, alg, cache_bytes)
                ours.append(t)
                walls["m"].append(w)
            # The same counts; libCacheSim divides in another order, so the last bit may differ.
            if not all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(theirs_mr, ours_mr)):
                print(f"MISMATCH {label} {alg}: libCacheSim {theirs_mr} mantle {ours_mr}")
            n = meta["requests"]
            (d, dm), (s, sm), (m, mm) = rate(n, default), rate(n, sized), rate(n, ours)
            wall = min(min(walls["d"]), min(walls["s"])) / min(walls["m"])
            print(f"| {label} | {alg} | {d:.2f} ({dm:.2f}) | {s:.2f} ({sm:.2f}) | {m:.2f} ({mm:.2f}) "
                  f"| {m / max(d, s):.2f}x | {wall:.2f}x | {ours_mr[0]:.6f} |")
            sys.stdout.flush()


def per_request(path, alg, cache_bytes, rounds, limit):
    reqs = list(mantle_reader(path))[:limit]
    keys = [r[1] for r in reqs]
    sizes = [r[2] for r in reqs]
    n = len(keys)

    def ours():
        get = mantle.Cache(alg, f"{cache_bytes}B").get
        misses = 0
        for k, s in zip(keys, sizes):
            if not get(k, s):
                misses += 1
        return misses

    def theirs():
        get = LCS[alg](cache_bytes).get
        req = lcs.Request()
        misses = 0
        for k, s in zip(keys, sizes):
            req.obj_id = k
            req.obj_size = s
            if not get(req):
                misses += 1
        return misses

    a, b, wa, wb = [], [], [], []
    for _ in range(rounds):
        t, w, lm = timed(theirs)
        a.append(t)
        wa.append(w)
        t, w, mm = timed(ours)
        b.append(t)
        wb.append(w)
    (lb, lmed), (mb, mmed) = rate(n, a), rate(n, b)
    print(f"| {os.path.basename(path)} ({n} requests) | {alg} | {lb:.2f} ({lmed:.2f}) | {mb:.2f} ({mmed:.2f}) "
          f"| {mb / lb:.2f}x | {min(wa) / min(wb):.2f}x | {lm} / {mm} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--algorithms", default="lru,fifo,clock,sieve,s3fifo")
    # shared/ sits beside the clone (CI) or beside the folder holding a worktree.
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
    traces = {t["trace"]: t for t in ref["traces"]}
    lib = os.path.join(args.traces, "libcachesim")
    twitter_bin = os.path.join(HERE, "work", "twitter_cluster52.oracleGeneral.bin")
    to_oracle_general(os.path.join(lib, "twitter_cluster52.csv"), twitter_bin)
    cases = [
        ("cloudPhysicsIO.oracleGeneral.bin", os.path.join(lib, "cloudPhysicsIO.oracleGeneral.bin"), "cloudPhysicsIO.oracleGeneral.bin"),
        ("twitter_cluster52.csv", os.path.join(lib, "twitter_cluster52.csv"), "twitter_cluster52.csv"),
        ("twitter_cluster52 as oracleGeneral", twitter_bin, "twitter_cluster52.csv"),
    ]
    algorithms = args.algorithms.split(",")
    whole_traces(cases, ref, traces, algorithms, args.rounds)
    print()
    print(f"## cache.get per request from a Python loop, {args.rounds} alternating rounds, "
          "M requests/s of CPU time, best (median)")
    print("| trace | alg | libCacheSim get(req) | mantle get(key, size) | mantle / libCacheSim | (wall) | misses (lcs / mantle) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for alg in ("lru", "s3fifo"):
        cache_bytes = next(r["cache_bytes"] for r in ref["results"]
                           if r["trace"] == "twitter_cluster52.csv" and r["algorithm"] == alg and r["fraction"] == 0.1)
        per_request(twitter_bin, alg, cache_bytes, args.rounds, args.per_request_limit)


if __name__ == "__main__":
    main()
