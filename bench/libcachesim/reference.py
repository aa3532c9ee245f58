#!/usr/bin/env python3
"""Records libCacheSim 0.3.5's miss ratios for the algorithms Mantle must agree with.

For every algorithm in ALGORITHMS (LRU, FIFO, CLOCK, SIEVE, S3-FIFO, ARC, LIRS, 2Q, SLRU,
LFU, LFUDA, CLOCK-Pro (twice: Mantle's paper version and its libCacheSim one), Random, Hyperbolic, GDSF, LeCaR, Cacheus, W-TinyLFU, LHD) and OFFLINE (Belady, BeladySize) at 1% and 10% of each trace's working set in
bytes, runs libCacheSim's own C simulator (through its Python package) and writes the exact
byte cache sizes and miss ratios to reference.json next to this script; ADMISSIONS are run
in front of LRU the same way. The cache crate's test `libcachesim_agreement` replays the same
traces and compares.

The offline algorithms (Belady, BeladySize) need each request's next access time. The
oracleGeneral trace carries it; for the CSV trace libCacheSim's reader has none (BeladySize
then loops forever), so this script computes it (the 1-based index of the key's next
request, INT64_MAX for none, as oracleGeneral stores it) and feeds the requests one by one.

Every online replay runs in a freshly spawned process: libCacheSim's random generator
(`next_rand`) is one per thread, starts at 0 and is advanced by whatever drew from it before,
so only a fresh process gives the learning and sampling algorithms (LeCaR, Cacheus, LHD) the sequence of draws Mantle
reproduces.

Usage (the package lives in a private virtualenv):
    python3 -m venv ~/.cache/lcs-venv && ~/.cache/lcs-venv/bin/pip install libcachesim==0.3.5
    ~/.cache/lcs-venv/bin/python bench/libcachesim/reference.py [TRACES_DIR] [--only NAME,...]

TRACES_DIR defaults to ../shared/traces relative to the repository root. With --only, just
the named algorithms and admission policies (an admission spec's name before any ':', e.g.
`adaptsize`) are run, and their entries are merged into the existing reference.json by
(trace, algorithm, fraction, admission); every other entry is kept as it is.
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
    # Mantle's `clockpro` is the paper's algorithm, compared with ClockPro.c as a different
    # one; `clockpro-libcachesim` reproduces ClockPro.c (docs/cache.md).
    "clockpro": lcs.ClockPro,
    "clockpro-libcachesim": lcs.ClockPro,
    "random": lcs.Random,
    "hyperbolic": lcs.Hyperbolic,
    "gdsf": lcs.GDSF,
    "lecar": lcs.LeCaR,
    "cacheus": lcs.Cacheus,
    "wtinylfu": lcs.WTinyLFU,
    "lhd": lcs.LHD,
}
# Offline algorithms: they need next-access times (see the module doc).
OFFLINE = {
    "belady": lcs.Belady,
    "beladysize": lcs.BeladySize,
}
# Admission policies run in front of LRU: Mantle's `--admission` spec -> a factory taking
# the trace's mean object size (the size threshold's parameter).
ADMISSIONS = {
    "size": lambda mean: lcs.SizeAdmissioner(),
    "size:size={mean}": lambda mean: lcs.SizeAdmissioner(mean),
    "prob": lambda mean: lcs.ProbAdmissioner(),
    "bloomfilter": lambda mean: lcs.BloomFilterAdmissioner(),
    "adaptsize": lambda mean: lcs.AdaptSizeAdmissioner(),
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


INT64_MAX = 2**63 - 1


def requests_with_next_access(reader):
    """(obj_id, obj_size, next_access_vtime) of every request, computed backwards."""
    reader.reset()
    reqs = [(r.obj_id, r.obj_size) for r in reader]
    nxt = [INT64_MAX] * len(reqs)
    seen = {}
    for i in range(len(reqs) - 1, -1, -1):
        key = reqs[i][0]
        nxt[i] = seen.get(key, INT64_MAX)
        seen[key] = i + 1
    reader.reset()
    return [(k, s, n) for (k, s), n in zip(reqs, nxt)]


def replay_fed(cache, requests):
    """libCacheSim's own get() per request, with our next-access times."""
    req = lcs.Request()
    misses = miss_bytes = total_bytes = 0
    for key, size, nxt in requests:
        req.obj_id, req.obj_size, req.next_access_vtime = key, size, nxt
        total_bytes += size
        if not cache.get(req):
            misses += 1
            miss_bytes += size
    return misses / len(requests), miss_bytes / total_bytes


def replay(traces_dir, name, alg, fraction, out):
    """One libCacheSim replay, run in a child process so that it can be timed out."""
    _, _, reader = open_trace(traces_dir, name)
    # A float size is libCacheSim's "fraction of the working set in bytes":
    # int(fraction * working_set_bytes).
    cache = ALGORITHMS[alg](fraction, reader=reader)
    miss_ratio, byte_miss_ratio = cache.process_trace(reader)
    out.put((cache.cache_size, miss_ratio, byte_miss_ratio))


def timed_replay(traces_dir, name, alg, fraction, wss_bytes):
    spawn = multiprocessing.get_context("spawn")
    out = spawn.Queue()
    child = spawn.Process(target=replay, args=(traces_dir, name, alg, fraction, out))
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


def result_key(result):
    return (result["trace"], result["algorithm"], result["fraction"], result.get("admission"))


def merge(old_results, new_results):
    """`old_results` with every entry of `new_results` replacing the one with its key."""
    new_by_key = {result_key(r): r for r in new_results}
    merged = [new_by_key.pop(result_key(r), r) for r in old_results]
    return merged + [r for r in new_results if result_key(r) in new_by_key]


def parse_args(argv):
    """(traces_dir, only): `only` is None (everything) or a set of names."""
    args = list(argv)
    only = None
    if "--only" in args:
        at = args.index("--only")
        if at + 1 >= len(args):
            sys.exit("--only needs a comma-separated list of names")
        only = set(args[at + 1].split(","))
        del args[at : at + 2]
        unknown = only - set(ALGORITHMS) - set(OFFLINE) - {s.split(":")[0] for s in ADMISSIONS}
        if unknown:
            sys.exit(f"--only: unknown names {sorted(unknown)}")
    traces_dir = args[0] if args else os.path.join(REPO, "..", "shared", "traces")
    return traces_dir, only


def main():
    if lcs.__version__ != VERSION:
        sys.exit(f"libcachesim {lcs.__version__} is installed; the reference is for {VERSION}")
    traces_dir, only = parse_args(sys.argv[1:])

    def wanted(name):
        return only is None or name.split(":")[0] in only

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
        fed = None
        for fraction in FRACTIONS:
            # Online algorithms run in a child process each, so that a slow one can be timed out.
            for alg in filter(wanted, ALGORITHMS):
                results.append(timed_replay(traces_dir, name, alg, fraction, wss_bytes))
            runs = [
                (alg, lambda f, c=cls: c(f, reader=reader), None)
                for alg, cls in OFFLINE.items()
                if wanted(alg)
            ]
            mean = wss_bytes // wss_objects
            runs += [
                ("lru", lambda f, m=make: lcs.LRU(f, reader=reader, admissioner=m(mean)), spec.format(mean=mean))
                for spec, make in ADMISSIONS.items()
                if wanted(spec)
            ]
            for alg, make, admission in runs:
                # A float size is libCacheSim's "fraction of the working set in bytes":
                # int(fraction * working_set_bytes).
                cache = make(fraction)
                if alg in OFFLINE and fmt != "oracleGeneral":
                    if fed is None:
                        fed = requests_with_next_access(reader)
                    miss_ratio, byte_miss_ratio = replay_fed(cache, fed)
                else:
                    miss_ratio, byte_miss_ratio = cache.process_trace(reader)
                result = {
                    "trace": name,
                    "algorithm": alg,
                    "fraction": fraction,
                    "cache_bytes": cache.cache_size,
                    "miss_ratio": miss_ratio,
                    "byte_miss_ratio": byte_miss_ratio,
                }
                if admission is not None:
                    result["admission"] = admission
                results.append(result)
                print(f"{name:36} {alg:10} {admission or '':16} {fraction:5} {cache.cache_size:>10} B  miss {miss_ratio:.6f}", flush=True)
    path = os.path.join(HERE, "reference.json")
    if only is not None:
        with open(path) as f:
            results = merge(json.load(f)["results"], results)
    out = {
        "generator": "bench/libcachesim/reference.py",
        "libcachesim_version": VERSION,
        "semantics": (
            "every request is a lookup that inserts on miss; miss_ratio = misses / requests; "
            "miss_ratio null: libCacheSim did not finish within timed_out_s seconds"
        ),
        "traces": traces,
        "results": results,
    }
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
