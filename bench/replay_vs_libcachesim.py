#!/usr/bin/env python3
"""Side-by-side replay throughput: Mantle vs libCacheSim (run through bench/replay_vs_libcachesim).

Both tools replay the whole trace, reading it from disk, with the same algorithm and the same
byte capacity (10% of the working set, as recorded in bench/libcachesim/reference.json). Runs
alternate between the tools so that machine noise hits both alike; the best and the median of
each are printed. Mantle's time is the replay's own `wall_seconds` (reading the trace and
simulating; it starts once the trace is open and the cache's index is sized, which
libCacheSim's time includes: its reader's construction and its cache's creation; neither
counts process start-up); its whole-process time is printed too. libCacheSim runs twice per round: with its default hash table (2^24 slots)
and with one sized to the trace (2^ceil(log2(objects)+1), at least 2^16), which is much faster
on small traces; the ratio is against the faster of the two. A 1M-request oracleGeneral trace is
made from twitter_cluster52.csv (under bench/work/, not committed) so the binary format is also
measured on more than the 114k-request cloudPhysics sample. libCacheSim is timed as its
reader construction plus `process_trace` (its C loop) inside Python.

With `--callgrind` each case also runs once under callgrind on each side and prints the
instructions per request of the two loops (Mantle's `replay_batches`, libCacheSim's
`process_trace`, both reading the trace and simulating): unlike the wall clock, that figure
does not move with the load of a shared machine.
"""

import argparse
import json
import math
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import libcachesim as lcs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "libcachesim"))
from oracle_general import to_oracle_general  # noqa: E402
from reference import ALGORITHMS, OFFLINE as OFFLINE_CLASSES  # noqa: E402  (Mantle's name -> libCacheSim class)

CLASSES = {**ALGORITHMS, **OFFLINE_CLASSES}

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def mantle_algorithms(mantle):
    """The eviction algorithms this Mantle binary knows, from its own error message."""
    out = subprocess.run([mantle, "replay", "--trace", os.devnull, "--eviction", "?", "--cache-size", "1"],
                         capture_output=True, text=True)
    listed = re.search(r"expected one of:? ([a-z0-9, -]+)", out.stderr + out.stdout)
    if not listed:
        sys.exit(f"bench: cannot tell which algorithms {mantle} has:\n{out.stderr}")
    return [name.strip() for name in listed.group(1).split(",")]


# Mantle algorithms mapped to a libCacheSim class that runs another algorithm: the rates
# compare different work (docs/cache.md).
DIFFERENT = {"clockpro": "  (different algorithm: the paper's CLOCK-Pro vs ClockPro.c;"
                         " clockpro-libcachesim is ClockPro.c)"}

# Offline algorithms need next-access times, which only oracleGeneral traces give libCacheSim
# (on the CSV its BeladySize never finishes); Mantle's time for them excludes its pre-pass
# (`process` includes it).
OFFLINE = set(OFFLINE_CLASSES)


def lcs_reader(path):
    if path.endswith(".oracleGeneral.bin"):
        return lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
    params = lcs.ReaderInitParam(has_header=True, has_header_set=True, delimiter=",",
                                 obj_id_is_num=True, obj_id_is_num_set=True)
    params.time_field, params.obj_id_field, params.obj_size_field = 1, 2, 3
    return lcs.TraceReader(path, lcs.TraceType.CSV_TRACE, params)


def run_lcs(path, alg, cache_bytes, hashpower):
    start = time.perf_counter()
    reader = lcs_reader(path)
    cache = CLASSES[alg](cache_bytes, hashpower=hashpower)
    miss_ratio, _ = cache.process_trace(reader)
    return time.perf_counter() - start, miss_ratio


class LcsCrashed(Exception):
    """libCacheSim's process died in a run (libCacheSim 0.3.5's Random segfaults on
    twitter_cluster52.csv after a chain-length warning from its hash table)."""


def _lcs_child(conn, path, alg, cache_bytes, hashpower):
    conn.send(run_lcs(path, alg, cache_bytes, hashpower))
    conn.close()


def run_lcs_isolated(path, alg, cache_bytes, hashpower):
    """`run_lcs` in a forked child (timed there, as before), so that a crash inside
    libCacheSim's C code costs one case instead of the whole bench."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_lcs_child, args=(send, path, alg, cache_bytes, hashpower))
    child.start()
    send.close()
    try:
        result = receive.recv()
    except EOFError:
        result = None
    child.join()
    if result is None:
        raise LcsCrashed(f"libCacheSim died (exit status {child.exitcode})")
    return result


def run_mantle(mantle, path, alg, cache_bytes):
    """Returns (replay seconds as Mantle reports them, whole-process seconds, miss ratio)."""
    start = time.perf_counter()
    out = subprocess.run(
        [mantle, "replay", "--trace", path, "--cache-size", f"{cache_bytes}B", "--eviction", alg,
         "--backend", "none", "--json", "--quiet"],
        check=True, capture_output=True, text=True).stdout
    elapsed = time.perf_counter() - start
    result = json.loads(out)
    return result["wall_seconds"], elapsed, result["miss_ratio"]


def callgrind_count(cmd, pick):
    """Instructions of one run under callgrind: the inclusive count of the function `pick`
    chooses among (count, name) lines of callgrind_annotate."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd,
                       check=True, capture_output=True)
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", out], check=True,
                              capture_output=True, text=True).stdout
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)", line)
        if m:
            rows.append((int(m.group(1).replace(",", "")), m.group(2)))
    return pick(rows)


def mantle_loop(rows):
    """Mantle's replay (reading the trace and simulating): `sim::replay::replay_batches`."""
    return max(n for n, name in rows if "sim::replay::replay_batches [" in name)


def lcs_loop(rows):
    """libCacheSim's `process_trace` (reading and simulating, in C): the outermost function of
    its extension module, whose symbols are stripped."""
    return max(n for n, name in rows if "libcachesim_python" in name and "PROGRAM" not in name)


def callgrind_case(mantle, path, alg, cache_bytes, hashpower, n):
    script = ("import sys, libcachesim as lcs\n"
              "sys.path.insert(0, sys.argv[1])\n"
              "from replay_vs_libcachesim import run_lcs\n"
              "run_lcs(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))\n")
    theirs = callgrind_count([sys.executable, "-c", script, HERE, path, alg, str(cache_bytes),
                              str(hashpower)], lcs_loop)
    ours = callgrind_count([mantle, "replay", "--trace", path, "--cache-size", f"{cache_bytes}B",
                            "--eviction", alg, "--backend", "none", "--json", "--quiet"],
                           mantle_loop)
    print(f"{'':34} {alg:6} callgrind, instructions per request: libCacheSim sized"
          f" {theirs / n:6.1f}, Mantle {ours / n:6.1f}: {theirs / ours:.2f}x")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mantle", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--algorithms", default="lru",
                    help="comma-separated, or `all`: every algorithm both Mantle and libCacheSim have")
    ap.add_argument("--callgrind", action="store_true",
                    help="also count each loop's instructions per request under callgrind"
                         " (independent of the machine's load)")
    # shared/ sits beside the clone (CI) or beside the folder holding a worktree.
    default = next((d for d in (os.path.join(REPO, "..", "shared", "traces"),
                                os.path.join(REPO, "..", "..", "shared", "traces"))
                    if os.path.isdir(d)), os.path.join(REPO, "..", "shared", "traces"))
    ap.add_argument("--traces", default=default)
    args = ap.parse_args()
    if not os.path.isdir(args.traces):
        sys.exit(f"bench: traces folder {args.traces} is absent; nothing to measure")
    with open(os.path.join(HERE, "libcachesim", "reference.json")) as f:
        ref = json.load(f)
    traces = {t["trace"]: t for t in ref["traces"]}
    if args.algorithms == "all":
        algorithms = [a for a in mantle_algorithms(args.mantle) if a in CLASSES]
    else:
        algorithms = args.algorithms.split(",")
        unknown = [a for a in algorithms if a not in CLASSES]
        if unknown:
            sys.exit(f"bench: libCacheSim has no {', '.join(unknown)} here (known: {', '.join(CLASSES)})")
    twitter_bin = os.path.join(HERE, "work", "twitter_cluster52.oracleGeneral.bin")
    to_oracle_general(os.path.join(args.traces, "libcachesim", "twitter_cluster52.csv"), twitter_bin)
    cases = [
        ("cloudPhysicsIO.oracleGeneral.bin", os.path.join(args.traces, "libcachesim", "cloudPhysicsIO.oracleGeneral.bin"), "cloudPhysicsIO.oracleGeneral.bin"),
        ("twitter_cluster52.csv", os.path.join(args.traces, "libcachesim", "twitter_cluster52.csv"), "twitter_cluster52.csv"),
        ("twitter_cluster52 as oracleGeneral", twitter_bin, "twitter_cluster52.csv"),
    ]
    print(f"libcachesim {lcs.__version__}; {args.rounds} alternating rounds; cache = 10% of working set bytes;"
          " Mreq/s best (median)")
    print(f"{'trace':34} {'alg':20} {'libCacheSim default':>20} {'libCacheSim sized':>18} {'Mantle':>16}"
          f" {'process':>8} {'ratio':>6}  miss ratio (lcs / mantle)")
    for label, path, ref_name in cases:
        meta = traces[ref_name]
        hashpower = max(16, math.ceil(math.log2(meta["working_set_objects"])) + 1)
        for alg in algorithms:
            if alg in OFFLINE and not path.endswith(".bin"):
                continue
            cache_bytes = next(r["cache_bytes"] for r in ref["results"]
                               if r["trace"] == ref_name and r["algorithm"] == alg and r["fraction"] == 0.1)
            default, sized, ours, ours_process = [], [], [], []
            try:
                for _ in range(args.rounds):
                    t, mr_lcs = run_lcs_isolated(path, alg, cache_bytes, 24)
                    default.append(t)
                    t, _ = run_lcs_isolated(path, alg, cache_bytes, hashpower)
                    sized.append(t)
                    t, t_process, mr_mantle = run_mantle(args.mantle, path, alg, cache_bytes)
                    ours.append(t)
                    ours_process.append(t_process)
            except LcsCrashed as crash:
                print(f"{label:34} {alg:20} skipped: {crash}")
                sys.stdout.flush()
                continue
            n = meta["requests"]
            rate = lambda ts: (n / min(ts) / 1e6, n / statistics.median(ts) / 1e6)
            (d_best, d_med), (s_best, s_med), (m_best, m_med) = rate(default), rate(sized), rate(ours)
            p_best = rate(ours_process)[0]
            peer = max(d_best, s_best)
            print(f"{label:34} {alg:20} {d_best:9.2f} ({d_med:6.2f}) {s_best:8.2f} ({s_med:6.2f})"
                  f" {m_best:7.2f} ({m_med:6.2f}) {p_best:8.2f} {m_best / peer:5.2f}x"
                  f"  {mr_lcs:.6f} / {mr_mantle:.6f}{DIFFERENT.get(alg, '')}")
            sys.stdout.flush()
            if args.callgrind:
                callgrind_case(args.mantle, path, alg, cache_bytes, hashpower, n)


if __name__ == "__main__":
    main()
