#!/usr/bin/env python3
"""A/B replay speed of two `mantle` binaries (e.g. main's and a branch's) on the same trace,
algorithm and cache size, alternating the two run by run so that machine noise hits both.

Prints, per case, each side's best and median M requests/s (from the replay's own
`wall_seconds`) and new/base of the medians, and fails if the two binaries disagree on any
figure of the replay's JSON report but its timings (hits, misses, evictions, footprint means
and peaks, back-end, per-class counters): a speed change must not be a behaviour change.

    bench/replay_ab --base OLD_MANTLE [--new NEW_MANTLE] [--rounds N] [--traces DIR]
                    [--algorithms a,b] [--cloud]

`--algorithms` replaces the default cases (LRU, S3-FIFO, LRU with size classes) by those
algorithms; `--cloud` adds cloudPhysicsIO.oracleGeneral.bin (a run of ~6 ms, so use many
rounds). Each case also prints the 10th percentile of the speeds, which a loaded machine
moves less than the best.
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
    ap.add_argument("--algorithms", help="comma-separated; replaces the default cases")
    ap.add_argument("--cloud", "--cloudphysics", action="store_true",
                    help="also cloudPhysicsIO.oracleGeneral.bin")
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
    if args.cloud:
        traces.append(("cloudPhysicsIO", os.path.join(args.traces, "libcachesim",
                                                      "cloudPhysicsIO.oracleGeneral.bin")))
    failed = False
    for label, path in traces:
        failed |= compare(args, label, path, cases)
    print(f"load average after: {os.getloadavg()}")
    sys.exit(1 if failed else 0)


def compare(args, label, trace, cases):
    """Prints each case's speeds on `trace`; true if the two binaries disagree on one."""
    cache_bytes = working_set_bytes(trace) // 10
    print(f"trace {label}, cache {cache_bytes} B (10% of the working set), {args.rounds} rounds"
          f" alternating; load average {os.getloadavg()}")
    print(f"{'case':<24} {'base best (median) p10':>26} {'new best (median) p10':>26}"
          f" {'new/base median':>16} {'p10':>7}")
    failed = False
    for alg, cls in cases:
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
        print(f"{name:<24} {max(b):>9.2f} ({statistics.median(b):.2f}) {p10(b):6.2f}"
              f" {max(n):>12.2f} ({statistics.median(n):.2f}) {p10(n):6.2f}"
              f" {statistics.median(n) / statistics.median(b):>15.3f}x {p10(n) / p10(b):6.3f}x")
    return failed


def p10(speeds):
    """The speed that 90% of the runs reached."""
    return sorted(speeds, reverse=True)[len(speeds) // 10]


if __name__ == "__main__":
    main()
