"""mantle.replay gives `mantle replay --json`'s object, key for key and value for value, and
its per-tick series as `--metrics-out` writes it."""

import pandas as pd
import pytest

import mantle

from conftest import REPO

# Wall-clock figures differ from run to run.
TIMING = {"wall_seconds", "requests_per_second"}


def same_report(py, cli_json):
    d = py.to_dict()
    assert set(d) == set(cli_json)
    for k in cli_json:
        if k not in TIMING:
            assert d[k] == cli_json[k], k
        assert getattr(py, k) == d[k]


@pytest.mark.parametrize(
    "trace,size,eviction",
    [
        ("parsplice", "50", "lru"),
        ("parsplice", "30", "s3fifo"),
        ("sized", "10%", "s3fifo"),
        ("sized", "1MiB", "sieve"),
        ("sized", "500", "clock"),
        ("sized", "unlimited", "fifo"),
    ],
)
def test_replay_agrees_with_the_cli(traces, cli, trace, size, eviction):
    path = traces[trace]
    r = mantle.replay(str(path), cache_size=size, eviction=eviction)
    same_report(r, cli("replay", "--trace", path, "--cache-size", size, "--eviction", eviction, "--json", "--quiet"))


def test_integer_cache_size_means_objects_as_on_the_command_line(traces, cli):
    r = mantle.replay(traces["sized"], cache_size=500)
    assert r.capacity_objects == 500 and r.capacity_bytes is None
    same_report(r, cli("replay", "--trace", traces["sized"], "--cache-size", "500", "--json", "--quiet"))


def test_policy_with_params_and_tick_agrees_and_its_series_matches_metrics_out(traces, cli, tmp_path):
    path = traces["parsplice"]
    policy = REPO / "policies" / "fixed.lua"
    ticks = tmp_path / "ticks.csv"
    want = cli(
        "replay", "--trace", path, "--cache-size", "unlimited", "--policy", policy,
        "--param", "n=40", "--tick", "10s", "--metrics-out", ticks, "--json", "--quiet",
    )
    r = mantle.replay(path, cache_size="unlimited", policy=policy, params={"n": 40}, tick="10s")
    same_report(r, want)
    assert r.policy["ticks"] > 0
    m = r.metrics
    assert isinstance(m, pd.DataFrame)
    csv = pd.read_csv(ticks, keep_default_na=False)
    assert list(m.columns) == list(csv.columns)
    assert len(m) == len(csv)
    for col in ["tick", "requests", "cache_objects", "lookups", "hits", "backend_reads", "evictions"]:
        assert m[col].tolist() == csv[col].tolist(), col
    assert m["time"].tolist() == pytest.approx(csv["time"].tolist())
    # A bare number is seconds.
    assert mantle.replay(path, cache_size="unlimited", policy=policy, params={"n": 40}, tick=10).to_dict()["misses"] == want["misses"]


@pytest.mark.parametrize(
    "policy,size,params",
    [("arc.lua", "40", {}), ("size_admission.lua", "10%", {"max_size": 2000})],
)
def test_a_policys_hooks_decide_as_in_the_cli(traces, cli, policy, size, params):
    """`policy=` with per-request hooks runs them (the same report as `replay --policy`), in
    mantle.replay and in mantle.compare's setups alike."""
    path = traces["sized"]
    policy = REPO / "policies" / "hooks" / policy
    flags = [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    want = cli(
        "replay", "--trace", path, "--cache-size", size, "--policy", policy, *flags,
        "--json", "--quiet",
    )
    plain = cli("replay", "--trace", path, "--cache-size", size, "--json", "--quiet")
    assert want["miss_ratio"] != plain["miss_ratio"]
    same_report(mantle.replay(path, cache_size=size, policy=policy, params=params), want)
    runs = mantle.compare(path, [{"cache_size": size, "policy": policy, "params": params}])
    assert runs["miss_ratio"].tolist() == [want["miss_ratio"]]


def test_classes_and_restart_with_warmup_agree(traces, cli, tmp_path):
    path = traces["sized"]
    classes = tmp_path / "classes.csv"
    classes.write_text(
        "IO class id,IO class name,Eviction priority,Allocation\n"
        "0,unclassified,22,1\n"
        "1,size:le:512&done,1,0.5\n"
    )
    want = cli("replay", "--trace", path, "--cache-size", "2MiB", "--classes", classes, "--json", "--quiet")
    r = mantle.replay(path, cache_size="2MiB", classes=classes)
    same_report(r, want)
    assert len(r.classes) == 2
    want = cli(
        "replay", "--trace", path, "--cache-size", "1000", "--restart-at", "50%",
        "--warmup", "lastk:100%", "--json", "--quiet",
    )
    r = mantle.replay(path, cache_size=1000, restart_at="50%", warmup="lastk:100%")
    same_report(r, want)
    assert r.warmup["strategy"] is not None


def test_timeless_trace_ticks_on_requests_with_a_notice(tmp_path, cli):
    path = tmp_path / "keys.txt"
    path.write_text("".join(f"{i % 97}\n" for i in range(5000)))
    policy = REPO / "policies" / "fixed.lua"
    with pytest.warns(RuntimeWarning, match="no timestamps"):
        r = mantle.replay(path, cache_size="unlimited", policy=policy, params={"n": 10})
    same_report(r, cli("replay", "--trace", path, "--cache-size", "unlimited", "--policy", policy, "--param", "n=10", "--json", "--quiet"))
    with pytest.raises(mantle.MantleError, match="no timestamps"):
        mantle.replay(path, cache_size=10, tick="1s")


def test_reader_options_carry_over(traces, cli):
    reader = mantle.TraceReader(traces["sized"], format="oracleGeneral")
    r = mantle.replay(reader, cache_size=300, eviction="lru")
    same_report(r, cli("replay", "--trace", traces["sized"], "--format", "oracleGeneral", "--cache-size", "300", "--json", "--quiet"))


def test_long_runs_release_the_gil(tmp_path):
    import threading

    path = tmp_path / "long.csv"
    mantle.gen_parsplice(path, duration="2h")
    done = threading.Event()
    spins = 0

    def work():
        mantle.replay(path, cache_size=100, eviction="s3fifo")
        done.set()

    t = threading.Thread(target=work)
    t.start()
    while not done.is_set():
        spins += 1
        done.wait(0.001)
    t.join()
    # With the GIL held for the whole replay this thread could not have looped meanwhile.
    assert spins > 5

