"""mantle.PluginCache and mantle.PluginAdmissioner against libCacheSim 0.3.5's.

CI has no libcachesim: libcachesim_plugincache.json holds what libCacheSim printed for the
same hooks (plugin_hooks.py) on the same generated traces, recorded by
bench/libcachesim/plugincache_reference.py (run it with a libcachesim 0.3.5 install to
re-record). The other tests need only mantle."""

import gc
import os
import json
from collections import OrderedDict
from pathlib import Path

import pytest

import mantle
import plugin_hooks as hooks

PINNED = json.loads((Path(__file__).parent / "libcachesim_plugincache.json").read_text())
CASES = {c["name"]: c for c in PINNED["cases"]}


@pytest.fixture(scope="module")
def plugin_traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("plugin")
    return {name: str(hooks.write_trace(d / f"{name}.oracleGeneral.bin", **c["trace"]))
            for name, c in CASES.items()}


def admissioner():
    return mantle.PluginAdmissioner("small", hooks.admit_init, hooks.admit_small,
                                    hooks.admit_clone, hooks.admit_update, hooks.admit_free)


def misses(ratio, requests):
    # libCacheSim returns 1 - hits/n, mantle misses/n: compare the counts they stand for.
    return round(ratio * requests)


def check(cache, mr_bmr, want):
    mr, bmr = mr_bmr
    assert misses(mr, want["requests"]) == want["misses"]
    assert bmr == pytest.approx(want["byte_miss_ratio"], rel=1e-12)
    assert (cache.get_n_obj(), cache.get_occupied_byte()) == (want["objects"], want["bytes"])


def test_pins_come_from_libcachesim_0_3_5():
    assert PINNED["libcachesim"] == "0.3.5"
    assert set(CASES) == {name for name, _, _ in hooks.CASES}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("algorithm", ["lru", "fifo"])
def test_miss_ratios_equal_libcachesims_plugincache(plugin_traces, name, algorithm):
    case = CASES[name]
    hook_set = hooks.LRU if algorithm == "lru" else hooks.FIFO
    cache = mantle.PluginCache(f"{case['cache_bytes']}B", *hook_set)
    check(cache, cache.process_trace(mantle.TraceReader(plugin_traces[name])), case[algorithm])


@pytest.mark.parametrize("name", list(CASES))
def test_plugin_admissioner_equals_libcachesims_with_both_caches(plugin_traces, name):
    case = CASES[name]
    reader = mantle.TraceReader(plugin_traces[name])
    for cache, want in [
        (mantle.PluginCache(f"{case['cache_bytes']}B", *hooks.LRU_ADMITTED, admissioner=admissioner()),
         case["lru_admitted"]),
        (mantle.Cache("lru", f"{case['cache_bytes']}B", admissioner=admissioner()),
         case["builtin_lru_admitted"]),
    ]:
        check(cache, cache.process_trace(reader), want)
        seen = cache.admissioner.data
        assert (seen.asked, seen.updates) == (want["asked"], want["updates"])


def test_call_order_is_libcachesims():
    log = []
    cache_hooks, adm_hooks = hooks.event_hooks(log)
    adm = mantle.PluginAdmissioner("events", *adm_hooks)
    cache = mantle.PluginCache("10B", *cache_hooks, admissioner=adm)
    hits = [cache.get(obj, size) for obj, size in hooks.EVENT_REQUESTS]
    removed = [cache.remove(obj) for obj in hooks.EVENT_REMOVES]
    log.append(["state", cache.get_n_obj(), cache.get_occupied_byte()])
    want = PINNED["events"]
    assert hits == want["hits"]
    assert removed == want["removed"]
    assert log == want["log"]
    del cache
    gc.collect()
    assert log[-1] == ["free"]


@pytest.mark.parametrize("trace,size", [("sized", "512KiB"), ("sized", "300"), ("parsplice", "25")])
def test_an_ordereddict_lru_equals_the_builtin_lru(traces, trace, size):
    # The parsplice trace has puts and deletes: they take the replay's semantics in both.
    reader = mantle.TraceReader(traces[trace])
    plugin = mantle.PluginCache(size, *hooks.LRU)
    builtin = mantle.Cache("lru", size)
    assert plugin.process_trace(reader) == builtin.process_trace(reader)
    assert (len(plugin), plugin.get_occupied_byte(), plugin.evictions) == (
        len(builtin), builtin.get_occupied_byte(), builtin.evictions)
    # The hooks' own index holds exactly what is cached.
    assert isinstance(plugin.data, OrderedDict) and len(plugin.data) == len(plugin)
    assert all(k in plugin for k in plugin.data)


def test_an_admissioner_that_admits_everything_changes_nothing(traces):
    # The admission path of mantle.Cache serves puts and deletes as Cache.serve does.
    reader = mantle.TraceReader(traces["parsplice"])
    for eviction in ["lru", "s3fifo"]:
        plain = mantle.Cache(eviction, 25)
        admitted = mantle.Cache(eviction, 25, admissioner=mantle.PluginAdmissioner(lambda req: True))
        assert plain.process_trace(reader) == admitted.process_trace(reader)
        assert (len(plain), plain.evictions) == (len(admitted), admitted.evictions)


def test_short_form_admissioner_and_per_request_gets():
    seen = []
    adm = mantle.PluginAdmissioner(lambda req: req.obj_size < 100,
                                   admissioner_update_hook=lambda req, size: seen.append((req.obj_id, size)))
    cache = mantle.Cache("lru", 2, admissioner=adm)
    assert not cache.get(1, 500) and 1 not in cache  # refused: a miss, not inserted
    assert not cache.get(2, 5) and 2 in cache
    assert cache.get(2, 5)
    assert seen == [(1, 2), (2, 2), (2, 2)]
    assert 'admissioner="PluginAdmissioner"' in repr(cache)
    assert cache.admissioner is adm and adm.data is None


def test_request_object_is_reused_and_has_libcachesims_names():
    reqs = []

    def hit(data, req):
        reqs.append(req)

    def miss(data, req):
        reqs.append(req)
        data.append((req.obj_id, req.obj_size, req.clock_time, req.op, req.valid))

    cache = mantle.PluginCache(10, lambda p: [], hit, miss, lambda d, r: 0, lambda d, i: None)
    cache.get(5, 3, time=7.5)
    cache.get(6)
    assert cache.data == [(5, 3, 7.5, "get", True), (6, 1, 0.0, "get", True)]
    assert reqs[0] is reqs[1]  # one request object per cache, rewritten per request
    assert repr(reqs[0]) == "mantle.Request(obj_id=6, obj_size=1, clock_time=0, op=\"get\")"


def test_init_hook_gets_the_common_cache_params():
    got = {}

    def init(params):
        got.update(cache_size=params.cache_size, capacity=params.capacity, name=params.cache_name,
                   ttl=params.default_ttl, hashpower=params.hashpower)
        return None

    noop = lambda *a: None  # noqa: E731
    c = mantle.PluginCache("64KiB", init, noop, noop, noop, noop, cache_name="mine")
    assert got == {"cache_size": 65536, "capacity": (None, 65536), "name": "mine",
                   "ttl": 86400 * 300, "hashpower": 24}
    assert (c.cache_size, c.cache_name, c.capacity) == (65536, "mine", (None, 65536))
    mantle.PluginCache(100, init, noop, noop, noop, noop)
    assert got["cache_size"] == 100 and got["capacity"] == (100, None)
    mantle.PluginCache("unlimited", init, noop, noop, noop, noop)
    assert got["cache_size"] == 0


def lru_with(**overrides):
    base = dict(zip(["init", "hit", "miss", "evict", "remove", "free"], hooks.LRU))
    base.update(overrides)
    return [base[k] for k in ["init", "hit", "miss", "evict", "remove", "free"]]


@pytest.mark.parametrize("hook,position,request_no", [
    ("cache_hit_hook", "hit", 2),
    ("cache_miss_hook", "miss", 1),
    ("cache_eviction_hook", "evict", 4),
    ("cache_remove_hook", "remove", None),
])
def test_a_hook_that_raises_is_a_mantle_error_naming_it(hook, position, request_no):
    def boom(*args):
        raise ValueError("bad plugin")

    cache = mantle.PluginCache(2, *lru_with(**{position: boom}))
    with pytest.raises(mantle.MantleError) as e:
        if position == "remove":
            cache.remove(1)
        else:
            for obj in [1, 1, 2, 3]:
                cache.get(obj)
    text = str(e.value)
    assert text.startswith(f"{hook} raised ValueError: bad plugin"), text
    if request_no is not None:
        assert f"(request {request_no}, object" in text
    assert isinstance(e.value.__cause__, ValueError)
    assert cache.get_n_obj() <= 2  # still usable


def test_hooks_that_raise_in_process_trace_and_in_init(traces):
    def boom(data, req):
        if req.obj_id == 3:
            raise KeyError(req.obj_id)
        data[req.obj_id] = 1

    cache = mantle.PluginCache(100, *lru_with(miss=boom))
    with pytest.raises(mantle.MantleError, match=r"cache_miss_hook raised KeyError: 3 \(request \d+, object 3\)"):
        cache.process_trace(mantle.TraceReader(traces["sized"]))
    with pytest.raises(mantle.MantleError, match="cache_init_hook raised ZeroDivisionError"):
        mantle.PluginCache(10, *lru_with(init=lambda p: 1 / 0))
    with pytest.raises(mantle.MantleError, match="admissioner_admit_hook raised RuntimeError: no"):
        def no(req):
            raise RuntimeError("no")
        mantle.Cache("lru", 10, admissioner=mantle.PluginAdmissioner(no)).get(1)
    with pytest.raises(mantle.MantleError, match="admissioner_init_hook raised"):
        mantle.PluginAdmissioner("x", lambda: 1 / 0, lambda d, r: True)


def test_keyboard_interrupt_in_a_hook_is_not_wrapped():
    def interrupt(data, req):
        raise KeyboardInterrupt

    cache = mantle.PluginCache(10, *lru_with(miss=interrupt))
    with pytest.raises(KeyboardInterrupt):
        cache.get(1)


@pytest.mark.parametrize("returned,message", [
    (12345, "cache_eviction_hook returned object 12345, which is not in the cache (request 3, object 3; 2 objects cached)"),
    (None, "cache_eviction_hook must return the id (an int) of a cached object to evict, got None (request 3, object 3)"),
    ("1", "cache_eviction_hook must return the id (an int) of a cached object to evict, got '1' (request 3, object 3)"),
    (-1, "cache_eviction_hook must return the id (an int) of a cached object to evict, got -1"),
])
def test_an_eviction_hook_returning_no_cached_id_is_a_clear_error(returned, message):
    cache = mantle.PluginCache(2, *lru_with(evict=lambda data, req: returned))
    cache.get(1)
    cache.get(2)
    with pytest.raises(mantle.MantleError) as e:
        cache.get(3)
    assert str(e.value).startswith(message), str(e.value)
    assert cache.get_n_obj() == 2 and 3 not in cache


@pytest.mark.parametrize("args,kwargs,message", [
    ((10, 1, *hooks.LRU[1:]), {}, "cache_init_hook must be callable, got int"),
    ((10, *hooks.LRU[:3], "x", hooks.remove), {}, "cache_eviction_hook must be callable, got str"),
    ((10, *hooks.LRU), {"admissioner": object()}, "admissioner must be a mantle.PluginAdmissioner, got object"),
    (("5%", *hooks.LRU), {}, "needs a trace"),
    (("abc", *hooks.LRU), {}, "invalid cache size 'abc'"),
])
def test_bad_plugin_arguments_raise(args, kwargs, message):
    with pytest.raises(mantle.MantleError, match=message):
        mantle.PluginCache(*args, **kwargs)


@pytest.mark.parametrize("args,message", [
    ((lambda r: True, lambda: None), "short form takes the admit hook alone"),
    ((3,), "admissioner_name must be a str"),
    (("x", lambda: None), "admissioner_init_hook and admissioner_admit_hook are required"),
    (("x", lambda: None, 5), "admissioner_admit_hook must be callable"),
])
def test_bad_admissioner_arguments_raise(args, message):
    with pytest.raises(mantle.MantleError, match=message):
        mantle.PluginAdmissioner(*args)


def test_free_hooks_run_once_when_the_last_reference_goes():
    freed = []
    adm = mantle.PluginAdmissioner("a", lambda: "state", lambda d, r: True,
                                   admissioner_free_hook=freed.append)
    noop = lambda *a: None  # noqa: E731
    cache = mantle.PluginCache(4, lambda p: "data", noop, noop, noop, noop, freed.append, admissioner=adm)
    other = mantle.Cache("lru", 4, admissioner=adm)
    del adm, cache
    gc.collect()
    assert freed == ["data"]
    del other
    gc.collect()
    assert freed == ["data", "state"]


def test_a_cycle_through_the_hooks_is_collected():
    freed = []
    box = []

    def hit(data, req, box=box):
        box[0].find(1)

    noop = lambda *a: None  # noqa: E731
    box.append(mantle.PluginCache(4, lambda p: None, hit, noop, noop, noop, lambda d: freed.append(1)))
    del box, hit  # the cache, its hit hook and the list now only reach each other
    gc.collect()
    assert freed == [1]


def test_a_hook_calling_back_into_its_cache_is_an_error_not_a_crash():
    holder = {}

    def hit(data, req):
        holder["cache"].get(2)

    noop = lambda *a: None  # noqa: E731
    cache = holder["cache"] = mantle.PluginCache(4, lambda p: None, hit, noop, noop, noop)
    cache.get(1)
    cache.find(1)
    with pytest.raises(mantle.MantleError, match="cache_hit_hook raised RuntimeError"):
        cache.get(1)


def test_ctrl_c_stops_process_trace(traces):
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    served = []

    def miss(data, req):
        hooks.lru_miss(data, req)
        served.append(req.obj_id)
        if len(served) == 100:
            os.kill(os.getpid(), signal.SIGINT)

    try:
        cache = mantle.PluginCache(10**9, *lru_with(miss=miss))
        with pytest.raises(KeyboardInterrupt):
            cache.process_trace(mantle.TraceReader(traces["sized"]))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(served) < 200  # stopped at once, not at the end of the trace


def test_an_update_hook_that_raises_names_it_for_both_caches():
    def update(req, cache_size):
        raise OSError("disk")

    adm = mantle.PluginAdmissioner(lambda req: True, admissioner_update_hook=update)
    for cache in [mantle.Cache("fifo", 4, admissioner=adm), mantle.PluginCache(4, *hooks.LRU, admissioner=adm)]:
        with pytest.raises(mantle.MantleError, match=r"admissioner_update_hook raised OSError: disk \(request 1, object 9\)"):
            cache.get(9)


@pytest.mark.parametrize("size", ["20KiB", "40"])
def test_puts_and_deletes_take_the_replays_semantics(tmp_path, size):
    # Gets, puts that resize (some beyond the whole cache) and deletes: the OrderedDict LRU
    # and the built-in LRU end every request in the same state.
    import random

    rng = random.Random(5)
    path = tmp_path / "ops.csv"
    with open(path, "w") as f:
        for _ in range(20_000):
            key = min(int(rng.paretovariate(0.9)), 300)
            op = rng.choices(["get", "put", "delete"], [80, 15, 5])[0]
            obj_size = 30_000 if rng.random() < 0.01 else rng.randint(1, 2_000)
            f.write(f"{key},{op},{obj_size}\n")
    reader = mantle.TraceReader(path, "csv", csv="obj-id-col=1,op-col=2,obj-size-col=3,has-header=false")
    ops = {op for _, _, _, op in reader}
    assert ops == {"get", "put", "delete"}
    limit = 20 * 1024 if size.endswith("KiB") else None

    def miss(data, req):
        if limit is None or req.obj_size <= limit:  # what the cache inserted
            data[req.obj_id] = req.obj_size

    plugin = mantle.PluginCache(size, *lru_with(miss=miss))
    builtin = mantle.Cache("lru", size)
    assert plugin.process_trace(reader) == builtin.process_trace(reader)
    assert (len(plugin), plugin.get_occupied_byte(), plugin.evictions) == (
        len(builtin), builtin.get_occupied_byte(), builtin.evictions)
    assert set(plugin.data) == {k for k in plugin.data if k in builtin} and len(plugin.data) == len(builtin)
