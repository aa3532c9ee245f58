"""Plugin hooks written once for both packages: libCacheSim's `PluginCache` and
`PluginAdmissioner` and mantle's take them unchanged (they read only `obj_id` and `obj_size`
of the request). bench/libcachesim/plugincache_reference.py runs them under libCacheSim and
records what it printed; test_plugin_cache.py checks mantle against those numbers. No import
of either package here, so both can load this file."""

import random
import struct
from collections import OrderedDict

# ---- LRU: an OrderedDict, most recent last ------------------------------------------------


def lru_init(params):
    return OrderedDict()


def lru_hit(data, req):
    data.move_to_end(req.obj_id)


def lru_miss(data, req):
    data[req.obj_id] = req.obj_size


def lru_evict(data, req):
    return data.popitem(last=False)[0]


def remove(data, obj_id):
    data.pop(obj_id, None)


def free(data):
    data.clear()


# ---- FIFO: the same dict, never reordered ----------------------------------------------


def fifo_hit(data, req):
    pass


LRU = (lru_init, lru_hit, lru_miss, lru_evict, remove, free)
FIFO = (lru_init, fifo_hit, lru_miss, lru_evict, remove, free)

# ---- Admission: objects up to a size, counting what it saw ---------------------------------

ADMIT_MAX_SIZE = 2000


class Seen:
    def __init__(self):
        self.asked = 0
        self.updates = 0


def admit_init():
    return Seen()


def admit_small(data, req):
    data.asked += 1
    return req.obj_size <= ADMIT_MAX_SIZE


def admit_update(data, req, cache_size):
    data.updates += 1


def admit_clone(data):
    raise NotImplementedError


def admit_free(data):
    pass


def lru_miss_admitted(data, req):
    # The miss hook runs on every miss, inserted or not (libCacheSim's order): an LRU behind
    # an admissioner tracks only what the admissioner lets in.
    if req.obj_size <= ADMIT_MAX_SIZE:
        data[req.obj_id] = req.obj_size


LRU_ADMITTED = (lru_init, lru_hit, lru_miss_admitted, lru_evict, remove, free)

# ---- Traces ----------------------------------------------------------------------------


def write_trace(path, *, requests=100_000, keys=5_000, seed=11, max_size=5_000, unit=False):
    """An oracleGeneral trace (libCacheSim's binary format, which both packages read): keys
    drawn from a Pareto (Zipf-like) law, each key with a fixed size (1 with `unit`)."""
    rng = random.Random(seed)
    sizes = {k: 1 if unit else rng.randint(1, max_size) for k in range(1, keys + 1)}
    with open(path, "wb") as f:
        for i in range(requests):
            key = min(int(rng.paretovariate(0.7)), keys)
            f.write(struct.pack("<IQIq", i // 100, key, sizes[key], -1))
    return path


# ---- The cases pinned ------------------------------------------------------------------

# (name, trace kwargs, cache size in bytes as libCacheSim takes it)
CASES = [
    ("sized-1MB", {}, 1_000_000),
    ("sized-200KB", {}, 200_000),
    ("unit-300", {"unit": True}, 300),
]


def event_hooks(log):
    """LRU hooks that also record every call, to compare the call order."""

    def init(params):
        log.append(["init", params.cache_size])
        return OrderedDict()

    def hit(data, req):
        log.append(["hit", req.obj_id])
        lru_hit(data, req)

    def miss(data, req):
        log.append(["miss", req.obj_id])
        # Inserted unless refused (7) or larger than the 10-byte cache.
        if req.obj_id != 7 and req.obj_size <= 10:
            data[req.obj_id] = req.obj_size

    def evict(data, req):
        victim = lru_evict(data, req)
        log.append(["evict", victim, "for", req.obj_id])
        return victim

    def rm(data, obj_id):
        log.append(["remove", obj_id])
        remove(data, obj_id)

    def fr(data):
        log.append(["free"])

    def a_init():
        log.append(["admit_init"])
        return None

    def a_admit(data, req):
        log.append(["admit", req.obj_id])
        return req.obj_id != 7

    def a_update(data, req, cache_size):
        log.append(["update", req.obj_id, cache_size])

    return (init, hit, miss, evict, rm, fr), (a_init, a_admit, admit_clone, a_update, admit_free)


# (obj_id, obj_size) into a cache of 10 bytes: hits, misses, evictions, a refusal (7) and an
# object larger than the cache (5).
EVENT_REQUESTS = [(1, 4), (2, 4), (1, 4), (3, 4), (7, 1), (5, 20), (2, 3), (4, 4), (1, 4)]
EVENT_REMOVES = [3, 99]
