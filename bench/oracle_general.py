"""Writes a libCacheSim Twitter CSV trace as oracleGeneral records, for the benchmarks that
replay the 1M-request trace in the binary format (bench/replay_vs_libcachesim, bench/replay_ab)."""

import os
import struct


def to_oracle_general(csv_path, out_path):
    """Writes the CSV trace as oracleGeneral records (next-access times are not needed)."""
    if os.path.exists(out_path):
        return
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(csv_path) as src, open(out_path + ".tmp", "wb") as dst:
        next(src)
        for line in src:
            t, obj, size, _ = line.split(",")
            dst.write(struct.pack("<IQIq", int(t), int(obj), int(size), -1))
    os.replace(out_path + ".tmp", out_path)
