#!/usr/bin/env python3
"""A/B replay speed of two `mantle` binaries (e.g. main's and a branch's) on the same trace,
algorithm and cache size, alternating the two run by run so that machine noise hits both.

Prints, per case, each side's best and median M requests/s (from the replay's own
`wall_seconds`) and new/base of the medians, and fails if the two binaries disagree on any
figure of the replay's JSON report but its timings (hits, misses, evictions, footprint means
and peaks, back-end, per-class counters): a speed change must not be a behaviour change.

    bench/replay_ab --base OLD_MANTLE [--new NEW_MANTLE] [--rounds N] [--traces DIR]
                    [--algorithms lru,clockpro] [--cloudphysics]

`--algorithms` replaces the default cases (lru, s3fifo, lru with size classes) by plain runs
of the algorithms listed; `--cloudphysics` also runs them on cloudPhysicsIO.oracleGeneral.bin
(114k requests, about 6 ms a run) at the size bench/replay_vs_libcachesim uses (10% of its
working set), where many rounds are needed for a stable median.
"""

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from oracle_general import to_oracle_general  # noqa: E402
# Fields of the report that may differ between the two binaries: the timings. Every other
# figure (hits, misses, evictions, footprint means and peaks, back-end, per-class counters)
# must be equal.
TIMINGS = {"wall_seconds", "requests_per_second"}


def working_set_bytes(path):
    sizes = {}
    with open(path, "rb") as f:
        data = f.read()
    for _, obj, size, _ in struct.iter_unpack("<IQIq", data):
        sizes.setdefault(obj, size)
    return sum(sizes.values())


def run(mantle, path, alg, cache_bytes, classes):
    cmd = [mantle, "replay", "--trace", path, "--cache-size", f"{cache_bytes}B", "--eviction",
           alg, "--backend", "none", "--json", "--quiet"]
    if classes:
        cmd += ["--classes", classes]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def compare(args, trace, cache_bytes, alg, cls):
    """Alternates the two binaries on one case; prints a row; true if their figures differ."""
    failed = False
    speeds = {"base": [], "new": []}
    reports = {}
    for r in range(args.rounds):
        order = ["base", "new"] if r % 2 == 0 else ["new", "base"]
        for side in order:
            rep = run(getattr(args, side), trace, alg, cache_bytes, cls)
            speeds[side].append(rep["requests"] / rep["wall_seconds"] / 1e6)
            reports[side] = {k: v for k, v in rep.items() if k not in TIMINGS}
    name = alg + (" --classes size-bins" if cls else "")
    if reports["base"] != reports["new"]:
        failed = True
        differ = sorted(k for k in reports["base"].keys() | reports["new"].keys()
                        if reports["base"].get(k) != reports["new"].get(k))
        print(f"{name}: the binaries disagree on {', '.join(differ)}:"
              f" {[reports['base'].get(k) for k in differ]} vs"
              f" {[reports['new'].get(k) for k in differ]}")
    b, n = speeds["base"], speeds["new"]
    print(f"{name:<24} {max(b):>9.2f} ({statistics.median(b):.2f}) {max(n):>12.2f}"
          f" ({statistics.median(n):.2f}) {statistics.median(n) / statistics.median(b):>8.3f}x")
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    # shared/ sits beside the clone (CI) or beside the folder holding a worktree.
    repo = os.path.join(HERE, "..")
    default = next((d for d in (os.path.join(repo, "..", "shared", "traces"),
                                os.path.join(repo, "..", "..", "shared", "traces"))
                    if os.path.isdir(d)), os.path.join(repo, "..", "shared", "traces"))
    ap.add_argument("--traces", default=default)
    ap.add_argument("--algorithms")
    ap.add_argument("--cloudphysics", action="store_true")
    args = ap.parse_args()
    csv = os.path.join(args.traces, "libcachesim", "twitter_cluster52.csv")
    if not os.path.exists(csv):
        print(f"SKIPPED: {csv} is absent (the shared traces)")
        return
    trace = os.path.join(HERE, "work", "twitter_cluster52.oracleGeneral.bin")
    to_oracle_general(csv, trace)
    classes = os.path.join(HERE, "..", "classes", "size-bins.csv")
    cases = [("lru", None), ("s3fifo", None), ("lru", classes)]
    if args.algorithms:
        cases = [(alg, None) for alg in args.algorithms.split(",")]
    traces = [("twitter_cluster52 as oracleGeneral", trace)]
    if args.cloudphysics:
        traces.append(("cloudPhysicsIO", os.path.join(args.traces, "libcachesim",
                                                      "cloudPhysicsIO.oracleGeneral.bin")))
    failed = False
    for label, path in traces:
        cache_bytes = working_set_bytes(path) // 10
        print(f"trace {label}, cache {cache_bytes} B (10% of the working set), {args.rounds}"
              f" rounds alternating; load average {os.getloadavg()}")
        print(f"{'case':<24} {'base best (median)':>20} {'new best (median)':>20}"
              f" {'new/base':>9}")
        for alg, cls in cases:
            failed |= compare(args, path, cache_bytes, alg, cls)
    print(f"load average after: {os.getloadavg()}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
