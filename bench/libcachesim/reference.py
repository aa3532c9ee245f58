#!/usr/bin/env python3
"""Records libCacheSim 0.3.5's miss ratios for the algorithms Mantle must agree with.

For every algorithm in ALGORITHMS (LRU, FIFO, CLOCK, SIEVE, S3-FIFO, ARC, LIRS, 2Q, SLRU,
LFU, LFUDA, CLOCK-Pro, Random, Hyperbolic) at 1% and 10% of each trace's working set in bytes,
runs libCacheSim's own C simulator (through its Python package) and writes the exact byte
cache sizes and miss ratios to reference.json next to this script. The cache crate's test
`libcachesim_agreement` replays the same traces and compares.

Usage (the package lives in a private virtualenv):
    python3 -m venv ~/.cache/lcs-venv && ~/.cache/lcs-venv/bin/pip install libcachesim==0.3.5
    ~/.cache/lcs-venv/bin/python bench/libcachesim/reference.py [TRACES_DIR]

TRACES_DIR defaults to ../shared/traces relative to the repository root.
"""

import json
import multiprocessing
import os
import sys

import libcachesim as lcs

VERSION = "0.3.5"
FRACTIONS = [0.01, 0.1]
# Mantle's algorithm name -> libCacheSim's cache class, all with their default parameters.
ALGORITHMS = {
    "lru": lcs.LRU,
    "fifo": lcs.FIFO,
    "clock": lcs.Clock,
    "sieve": lcs.Sieve,
    "s3fifo": lcs.S3FIFO,
    "arc": lcs.ARC,
    "lirs": lcs.LIRS,
    "twoq": lcs.TwoQ,
    "slru": lcs.SLRU,
    "lfu": lcs.LFU,
    "lfuda": lcs.LFUDA,
    "clockpro": lcs.ClockPro,
    "random": lcs.Random,
    "hyperbolic": lcs.Hyperbolic,
}
# A replay that runs longer than this is recorded as timed out rather than waited for:
# libCacheSim's LFUDA scans every frequency between the minimum and the maximum on each
# eviction, which on twitter_cluster52 does not finish in hours.
TIMEOUT_S = 300
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def open_trace(traces_dir, name):
    path = os.path.join(traces_dir, "libcachesim", name)
    if name.endswith(".oracleGeneral.bin"):
        return path, "oracleGeneral", lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
    # csv spec: time-col=1,obj-id-col=2,obj-size-col=3,obj-id-is-num=1,has-header=true
    params = lcs.ReaderInitParam(
        has_header=True,
        has_header_set=True,
        delimiter=",",
        obj_id_is_num=True,
        obj_id_is_num_set=True,
    )
    params.time_field = 1
    params.obj_id_field = 2
    params.obj_size_field = 3
    spec = "csv:time-col=1,obj-id-col=2,obj-size-col=3,obj-id-is-num=1,has-header=true"
    return path, spec, lcs.TraceReader(path, lcs.TraceType.CSV_TRACE, params)


def replay(traces_dir, name, alg, fraction, out):
    """One libCacheSim replay, run in a child process so that it can be timed out."""
    _, _, reader = open_trace(traces_dir, name)
    # A float size is libCacheSim's "fraction of the working set in bytes":
    # int(fraction * working_set_bytes).
    cache = ALGORITHMS[alg](fraction, reader=reader)
    miss_ratio, byte_miss_ratio = cache.process_trace(reader)
    out.put((cache.cache_size, miss_ratio, byte_miss_ratio))


def timed_replay(traces_dir, name, alg, fraction, wss_bytes):
    out = multiprocessing.Queue()
    child = multiprocessing.Process(target=replay, args=(traces_dir, name, alg, fraction, out))
    child.start()
    child.join(TIMEOUT_S)
    result = {"trace": name, "algorithm": alg, "fraction": fraction}
    if child.is_alive():
        child.kill()
        child.join()
        result.update(
            {"cache_bytes": int(fraction * wss_bytes), "miss_ratio": None, "timed_out_s": TIMEOUT_S}
        )
        print(f"{name:36} {alg:10} {fraction:5} timed out after {TIMEOUT_S} s")
        return result
    cache_size, miss_ratio, byte_miss_ratio = out.get()
    result.update(
        {"cache_bytes": cache_size, "miss_ratio": miss_ratio, "byte_miss_ratio": byte_miss_ratio}
    )
    print(f"{name:36} {alg:10} {fraction:5} {cache_size:>10} B  miss {miss_ratio:.6f}")
    return result


def main():
    if lcs.__version__ != VERSION:
        sys.exit(f"libcachesim {lcs.__version__} is installed; the reference is for {VERSION}")
    traces_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "..", "shared", "traces")
    traces = []
    results = []
    for name in ["cloudPhysicsIO.oracleGeneral.bin", "twitter_cluster52.csv"]:
        path, fmt, reader = open_trace(traces_dir, name)
        wss_objects, wss_bytes = reader.get_working_set_size()
        traces.append(
            {
                "trace": name,
                "format": fmt,
                "requests": reader.get_num_of_req(),
                "working_set_objects": wss_objects,
                "working_set_bytes": wss_bytes,
            }
        )
        for fraction in FRACTIONS:
            for alg in ALGORITHMS:
                results.append(timed_replay(traces_dir, name, alg, fraction, wss_bytes))
    out = {
        "generator": "bench/libcachesim/reference.py",
        "libcachesim_version": VERSION,
        "semantics": "every request is a lookup that inserts on miss; miss_ratio = misses / requests"
        + f"; miss_ratio null: libCacheSim did not finish within timed_out_s seconds",
        "traces": traces,
        "results": results,
    }
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
