"""mantle.Cache: process_trace gives `mantle replay`'s miss ratios exactly, and the
per-request calls behave as the replay's requests do."""

import pytest

import mantle

ALGORITHMS = ["lru", "fifo", "clock", "sieve", "s3fifo", "gdsf", "belady", "beladysize", "lecar", "cacheus", "lhd", "clockpro-libcachesim"]


@pytest.mark.parametrize("eviction", ALGORITHMS)
@pytest.mark.parametrize("trace,size", [("sized", "512KiB"), ("sized", "300"), ("parsplice", "25")])
def test_process_trace_agrees_with_replay(traces, cli, eviction, trace, size):
    path = traces[trace]
    want = cli("replay", "--trace", path, "--cache-size", size, "--eviction", eviction, "--json", "--quiet")
    cache = mantle.Cache(eviction, size)
    mr, bmr = cache.process_trace(mantle.TraceReader(path))
    assert (mr, bmr) == (want["miss_ratio"], want["byte_miss_ratio"])
    assert len(cache) == want["final_cache_objects"]
    assert cache.get_occupied_byte() == want["final_cache_bytes"]
    assert cache.evictions == want["evictions"]


def test_process_trace_takes_a_path_and_a_percentage_of_the_working_set(traces, cli):
    path = traces["sized"]
    want = cli("replay", "--trace", path, "--cache-size", "5%", "--eviction", "s3fifo", "--json", "--quiet")
    reader = mantle.TraceReader(path)
    cache = mantle.Cache("s3fifo", "5%", reader=reader)
    assert cache.capacity == (want["capacity_objects"], want["capacity_bytes"])
    assert cache.process_trace(str(path)) == (want["miss_ratio"], want["byte_miss_ratio"])
    with pytest.raises(mantle.MantleError, match="needs a trace"):
        mantle.Cache("lru", "5%")


def test_per_request_gets_match_process_trace(traces):
    reader = mantle.TraceReader(traces["sized"])
    by_request = mantle.Cache("sieve", "256KiB")
    lookups = misses = 0
    for _time, key, size, op in reader:
        assert op == "access"
        lookups += 1
        if not by_request.get(key, size):
            misses += 1
    whole = mantle.Cache("sieve", "256KiB")
    mr, _ = whole.process_trace(reader)
    assert misses / lookups == mr
    assert len(by_request) == len(whole)


def test_start_and_max_req(traces):
    reader = mantle.TraceReader(traces["sized"])
    a = mantle.Cache("lru", 200)
    a.process_trace(reader, max_req=1000)
    a.process_trace(reader, start_req=1000)
    b = mantle.Cache("lru", 200)
    b.process_trace(reader)
    assert len(a) == len(b) and a.evictions == b.evictions
    assert mantle.Cache("lru", 200).process_trace(reader, start_req=10**9) == (0.0, 0.0)


def test_get_insert_remove_find():
    c = mantle.Cache("lru", 2)
    assert not c.get(1)  # a miss inserts
    assert c.get(1)
    assert c.insert(2, 10)
    assert 2 in c and len(c) == 2
    assert c.find(1)  # 1 is now the most recent
    assert not c.find(3) and 3 not in c  # find never inserts
    c.insert(3)
    assert 2 not in c and c.evictions == 1
    assert c.remove(3) and not c.remove(3)
    assert c.get_n_obj() == 1 and c.get_occupied_byte() == 1
    assert c.evict(5) == 1 and len(c) == 0
    b = mantle.Cache("fifo", "100B")
    assert not b.insert(7, 101)  # larger than the cache
    assert b.capacity == (None, 100)
    assert "capacity_bytes=100" in repr(b)


@pytest.mark.parametrize(
    "args,message",
    [
        (("lru", "abc"), "invalid cache size 'abc'"),
        (("lru", 0), "must be > 0"),
        (("lru", 1.5), "must be whole"),
        (("lru", -3), "invalid cache size '-3'"),
        (("nosuch", 10), "eviction: "),
    ],
)
def test_bad_arguments_raise(args, message):
    with pytest.raises(mantle.MantleError, match=message):
        mantle.Cache(*args)


def test_keys_out_of_range_raise_not_crash():
    c = mantle.Cache("lru", 10)
    with pytest.raises(OverflowError):
        c.get(-1)
    with pytest.raises(OverflowError):
        c.insert(1, 2**40)


@pytest.mark.parametrize("admission", ["size:size=4096", "prob:prob=0.5", "bloomfilter"])
def test_admission_agrees_with_replay(traces, cli, admission):
    path = traces["sized"]
    want = cli("replay", "--trace", path, "--cache-size", "512KiB", "--admission", admission,
               "--json", "--quiet")
    cache = mantle.Cache("lru", "512KiB", admission=admission)
    assert cache.process_trace(mantle.TraceReader(path)) == (want["miss_ratio"], want["byte_miss_ratio"])
    assert cache.admission == admission


def test_admission_refuses_first_misses_and_bad_specs():
    cache = mantle.Cache("lru", 100, admission="bloomfilter")
    assert not cache.get(7) and 7 not in cache
    assert not cache.get(7) and 7 in cache
    with pytest.raises(mantle.MantleError, match="unknown admission policy 'lfu'"):
        mantle.Cache("lru", 100, admission="lfu")


def test_offline_get_takes_the_next_access():
    opt = mantle.Cache("belady", 2)
    for key, nxt in [(1, 4), (2, None), (3, 5), (1, None), (3, None)]:
        opt.get(key, next_access=nxt)
    # At key 3 the cache held 1 (needed next) and 2 (never again): 2 went.
    assert 2 not in opt and opt.evictions == 1
