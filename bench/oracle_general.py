"""Writes a libCacheSim Twitter CSV trace as oracleGeneral records, for the benchmarks that
replay the 1M-request trace in the binary format (bench/replay_vs_libcachesim, bench/replay_ab)."""

import os
import struct

# Bumped when the records change, so that a file written by an older version is rewritten.
VERSION = 2


def to_oracle_general(csv_path, out_path):
    """Writes the CSV trace as oracleGeneral records, with each request's next access time
    (the 1-based index of the key's next request, -1 for none, as libCacheSim's own files
    have it) so that libCacheSim's offline algorithms (Belady, BeladySize) can run on it."""
    stamp = f"{out_path}.v{VERSION}"
    if os.path.exists(out_path) and os.path.exists(stamp):
        return
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(csv_path) as src:
        next(src)
        rows = [line.split(",")[:3] for line in src]
    nxt = [-1] * len(rows)
    seen = {}
    for i in range(len(rows) - 1, -1, -1):
        obj = rows[i][1]
        nxt[i] = seen.get(obj, -1)
        seen[obj] = i + 1
    with open(out_path + ".tmp", "wb") as dst:
        for (t, obj, size), n in zip(rows, nxt):
            dst.write(struct.pack("<IQIq", int(t), int(obj), int(size), n))
    os.replace(out_path + ".tmp", out_path)
    open(stamp, "w").close()
