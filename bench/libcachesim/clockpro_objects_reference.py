#!/usr/bin/env python3
"""libCacheSim 0.3.5's ClockPro limited in objects (every request of size 1, as libCacheSim's
`ignore_obj_size` does), for the cache crate's `clockpro_libcachesim_in_objects` test, which
pins the misses printed here: 1% and 10% of each shared trace's distinct objects, truncated.

    ~/.cache/mantle-bench-venv/bin/python bench/libcachesim/clockpro_objects_reference.py [TRACES_DIR]
"""

import os
import sys

import libcachesim as lcs

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402  (its trace readers)


def misses(traces_dir, name, objects):
    _, _, reader = reference.open_trace(traces_dir, name)
    cache = lcs.ClockPro(objects)
    req = lcs.Request()
    missed = 0
    for r in reader:
        req.obj_id, req.obj_size = r.obj_id, 1
        missed += not cache.get(req)
    return missed


def main():
    traces_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "shared", "traces")
    for name, working_set in [("cloudPhysicsIO.oracleGeneral.bin", 48974), ("twitter_cluster52.csv", 143542)]:
        for fraction in (0.01, 0.1):
            objects = int(fraction * working_set)
            print(f'("{name}", {objects}, {misses(traces_dir, name, objects)}),', flush=True)


if __name__ == "__main__":
    main()
