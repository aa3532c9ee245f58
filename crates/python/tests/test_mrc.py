"""mantle.mrc gives `mantle analyze --mrc`'s curves; exact points are mantle.replay's miss
ratios; max_cache_size is replay's --max-cache-size."""

import pytest

import mantle

from conftest import REPO


def test_mrc_agrees_with_the_cli_and_with_replay(traces, cli):
    path = traces["sized"]
    frame = mantle.mrc(path, ["lru", "s3fifo"], sizes=["1%", 100, "50%"])
    want = cli("analyze", "--trace", path, "--mrc", "lru,s3fifo", "--mrc-sizes", "1%,100,50%", "--json")
    got = {(r.algorithm, r.cache_size): r.miss_ratio for r in frame.itertuples()}
    for curve in want["curves"]["curves"]:
        for p in curve["points"]:
            assert got[(curve["algorithm"], p["cache_size"])] == p["miss_ratio"]
    assert frame.attrs["unit"] == "objects" and frame.attrs["sample_rate"] == 1.0
    for r in frame.itertuples():
        replayed = mantle.replay(path, cache_size=r.cache_size, eviction=r.algorithm, backend="none")
        assert replayed.miss_ratio == r.miss_ratio


def test_sampled_curves_in_bytes_for_every_algorithm(traces):
    frame = mantle.mrc(traces["sized"], "all", unit="bytes", method="sampled", sample_rate=0.5, points=5)
    assert set(frame["method"]) == {"miniature"}
    assert frame.groupby("algorithm").size().min() == 5
    assert frame.attrs["unit"] == "bytes" and 0.49 < frame.attrs["sample_rate"] <= 0.5


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"algorithms": ["nosuch"]}, "algorithms: unknown eviction algorithm 'nosuch'"),
        ({"sizes": ["10x"]}, "sizes: invalid cache size '10x'"),
        ({"unit": "pages"}, "unit: unknown unit 'pages'"),
        ({"method": "sampled", "sample_rate": 2.0}, "sample rate: 2"),
        ({"unit": "bytes", "sizes": [100]}, "sizes: 100 is a count of objects"),
    ],
)
def test_mrc_errors_name_the_argument(traces, kwargs, message):
    with pytest.raises(mantle.MantleError, match=message):
        mantle.mrc(traces["sized"], **kwargs)


def test_max_cache_size_caps_a_policy_and_agrees_with_the_cli(traces, cli):
    path = traces["parsplice"]
    # dscache2 sizes the cache to the keys of the open fans, far above 30 here.
    policy = REPO / "policies" / "dscache2.lua"
    r = mantle.replay(path, cache_size=10, policy=policy, tick="10s", max_cache_size=30)
    assert r.peak_cache_objects <= 30 and r.capacity_clamps > 0
    want = cli(
        "replay", "--trace", path, "--cache-size", "10", "--policy", policy, "--tick", "10s", "--max-cache-size", "30", "--json", "--quiet",
    )
    assert (r.capacity_clamps, r.peak_cache_objects, r.miss_ratio) == (
        want["capacity_clamps"], want["peak_cache_objects"], want["miss_ratio"])
    free = mantle.replay(path, cache_size=10, policy=policy, tick="10s")
    assert free.peak_cache_objects > 30 and free.capacity_clamps is None
    with pytest.raises(mantle.MantleError, match="max_cache_size: invalid cache size"):
        mantle.replay(path, cache_size=10, max_cache_size="lots")
