"""mantle.compare, and errors: every bad input is a MantleError carrying the message the CLI
prints, never a crash."""

import pandas as pd
import pytest

import mantle
from conftest import REPO


def test_compare_one_row_per_setup(traces, cli):
    path = traces["parsplice"]
    policy = REPO / "policies" / "fixed.lua"
    setups = [
        {"cache_size": "unlimited", "label": "no management"},
        {"cache_size": 40, "eviction": "lru"},
        {"cache_size": 40, "eviction": "s3fifo"},
        {"cache_size": "unlimited", "policy": policy, "params": {"n": 40}},
    ]
    frame, results = mantle.compare(path, setups, results=True)
    assert isinstance(frame, pd.DataFrame) and len(frame) == 4
    assert frame["label"].tolist() == ["no management", "lru 40", "s3fifo 40", "fixed.lua n=40"]
    for col in ["miss_ratio", "byte_miss_ratio", "mean_cache_objects", "backend.reads", "policy.ticks"]:
        assert col in frame.columns, col
    want = cli("replay", "--trace", path, "--cache-size", "40", "--eviction", "s3fifo", "--json", "--quiet")
    assert frame.loc[2, "miss_ratio"] == want["miss_ratio"]
    assert results[3].metrics["cache_objects"].max() > 0
    # The CLI's compare gives the same numbers for the same setups.
    want = cli("compare", "--trace", path, "--fixed", "40", "--policy", f"{policy}:n=40", "--json")
    cli_mr = [r["result"]["miss_ratio"] for r in want["runs"]]
    assert frame["miss_ratio"].tolist() == [cli_mr[0], cli_mr[1], frame.loc[2, "miss_ratio"], cli_mr[2]]


def test_compare_errors_name_the_setup(traces, tmp_path):
    with pytest.raises(mantle.MantleError, match="cache_size is required"):
        mantle.compare(traces["parsplice"], [{"eviction": "lru"}])
    with pytest.raises(mantle.MantleError, match="nothing to compare"):
        mantle.compare(traces["parsplice"], [])
    with pytest.raises(mantle.MantleError, match="restart_at"):
        mantle.compare(traces["parsplice"], [{"cache_size": 10, "label": "x", "restart_at": "200%"}])


@pytest.fixture
def broken_policy(tmp_path):
    p = tmp_path / "broken.lua"
    p.write_text("function when(\n  return true\nend\n")
    return p


def test_errors_carry_the_clis_messages(traces, cli_error, broken_policy, tmp_path):
    missing = tmp_path / "missing.csv"
    cases = [
        (dict(trace=missing, cache_size=10), ["--trace", missing, "--cache-size", "10"]),
        (dict(trace=traces["parsplice"], cache_size="12XB"), ["--trace", traces["parsplice"], "--cache-size", "12XB"]),
        (dict(trace=traces["parsplice"], cache_size="unlimited", policy=broken_policy),
         ["--trace", traces["parsplice"], "--cache-size", "unlimited", "--policy", broken_policy]),
        (dict(trace=traces["parsplice"], cache_size=10, restart_at="2000000"),
         ["--trace", traces["parsplice"], "--cache-size", "10", "--restart-at", "2000000"]),
    ]
    for kwargs, argv in cases:
        stderr = cli_error("replay", *argv)
        with pytest.raises(mantle.MantleError) as err:
            mantle.replay(**kwargs)
        message = str(err.value)
        # The part after the flag/argument name is the CLI's own message.
        core = message.split(": ", 1)[1] if message.startswith(("cache_size", "policy", "restart_at")) else message
        assert core in stderr, (message, stderr)


def test_bad_arguments_raise_mantle_errors(traces):
    p = traces["parsplice"]
    for kwargs, match in [
        (dict(cache_size=10, eviction="mru"), "eviction"),
        (dict(cache_size=10, tick="0s"), "tick"),
        (dict(cache_size=10, tick="fast"), "tick"),
        (dict(cache_size=10, backend="ssd"), "backend"),
        (dict(cache_size=10, warmup="lastk:10"), "go with restart_at"),
        (dict(cache_size=10, params={"n": 1}), "go with a policy"),
        (dict(cache_size=10, restart_at="x%"), "restart_at"),
        (dict(cache_size=10, classes=p.parent / "none.csv"), "classes"),
        (dict(cache_size=True), "bool"),
        (dict(cache_size=[1]), "expected a number or a string"),
    ]:
        with pytest.raises(mantle.MantleError, match=match):
            mantle.replay(p, **kwargs)
    with pytest.raises(mantle.MantleError, match="a path"):
        mantle.replay(42, cache_size=10)
    with pytest.raises(TypeError):
        mantle.replay(p)  # cache_size is required
    assert issubclass(mantle.MantleError, Exception)
