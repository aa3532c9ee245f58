"""mantle.TraceReader, mantle.analyze, mantle.check_policy and mantle.gen_parsplice against
the CLI's own answers."""

import filecmp
import subprocess

import pandas as pd
import pytest

import mantle
from conftest import REPO


def test_reader_iterates_every_request(traces, cli):
    reader = mantle.TraceReader(traces["parsplice"])
    assert reader.format == "parsplice" and reader.has_timestamps
    reqs = list(reader)
    want = cli("replay", "--trace", traces["parsplice"], "--cache-size", "10", "--json", "--quiet")
    assert len(reqs) == want["requests"]
    assert sum(1 for r in reqs if r[3] == "get") == want["gets"]
    assert sum(1 for r in reqs if r[3] == "put") == want["puts"]
    t, key, size, op = reqs[0]
    assert isinstance(t, float) and isinstance(key, int) and size == 1
    # Each iteration is a new pass from the start.
    assert next(iter(reader)) == reqs[0]
    ws = reader.working_set()
    assert ws == {"objects": want["puts"], "bytes": want["puts"], "has_sizes": False}


def test_reader_sizes_and_format_errors(traces):
    sized = list(mantle.TraceReader(traces["sized"]))
    assert len(sized) == 60_000 and all(op == "access" for *_, op in sized)
    assert max(s for _, _, s, _ in sized) > 1
    with pytest.raises(mantle.MantleError, match="format: "):
        mantle.TraceReader(traces["sized"], format="nosuchformat")
    with pytest.raises(mantle.MantleError, match="No such file"):
        mantle.TraceReader(traces["dir"] / "missing.csv")


def test_analyze_agrees_with_the_cli(traces, cli):
    path = traces["parsplice"]
    want = cli("analyze", "--trace", path, "--json")
    a = mantle.analyze(path)
    for k in ["requests", "gets", "puts", "unique_keys", "duration_s", "peak_read_rate"]:
        assert a.summary[k] == want[k] and getattr(a, k) == want[k]
    assert isinstance(a.mrc, pd.DataFrame)
    assert a.mrc.to_dict("records") == want["mrc"]["points"]
    assert a.fans.to_dict("records") == want["fans"]["fans"]
    assert a.regimes.to_dict("records") == want["regimes"]["regimes"]
    assert a.summary["fans.count"] == want["fans"]["count"]
    assert list(a.series.columns) == list(want["series"].keys())
    w = mantle.analyze(path, window="5m", regimes=3)
    want = cli("analyze", "--trace", path, "--window", "5m", "--regimes", "3", "--json")
    assert w.summary["window_s"] == 300 and len(w.regimes) == len(want["regimes"]["regimes"])
    assert w.summary["mean_unique_keys_per_window"] == want["mean_unique_keys_per_window"]


def test_check_policy(tmp_path, mantle_bin):
    ok = mantle.check_policy(REPO / "policies" / "fixed.lua")
    assert ok and ok.ok and "when" in ok.callbacks and ok.problems == []
    out = subprocess.run([mantle_bin, "policy", "check", REPO / "policies" / "fixed.lua"], capture_output=True, text=True)
    assert str(ok) == out.stdout
    bad = tmp_path / "bad.lua"
    bad.write_text("function when()\n  return servers[whoami].cachesize >\nend\n")
    report = mantle.check_policy(bad)
    assert not report and report.problems
    line, message = report.problems[0]
    assert line == 3
    out = subprocess.run([mantle_bin, "policy", "check", bad], capture_output=True, text=True)
    assert out.returncode != 0 and str(report) in out.stderr
    with pytest.raises(mantle.MantleError, match="cannot read"):
        mantle.check_policy(tmp_path / "missing.lua")


def test_gen_parsplice_writes_what_the_cli_writes(tmp_path, mantle_bin):
    ours = tmp_path / "ours.csv"
    theirs = tmp_path / "theirs.csv"
    summary = mantle.gen_parsplice(ours, seed=5, duration="15m", workers=8, growth_rate=0.5)
    subprocess.run(
        [mantle_bin, "gen", "parsplice", "--seed", "5", "--duration", "15m", "--workers", "8",
         "--growth-rate", "0.5", "-o", theirs],
        check=True, capture_output=True,
    )
    assert filecmp.cmp(ours, theirs, shallow=False)
    assert summary["requests"] == sum(1 for _ in mantle.TraceReader(ours))
    assert mantle.gen_parsplice(tmp_path / "n.csv", duration=600)["requests"] > 0
    with pytest.raises(mantle.MantleError, match="duration"):
        mantle.gen_parsplice(tmp_path / "x.csv", duration="soon")
    with pytest.raises(mantle.MantleError):
        mantle.gen_parsplice(tmp_path / "x.csv", workers=0)


def test_an_empty_trace_gives_empty_frames(tmp_path, cli):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    r = mantle.replay(empty, cache_size=10, format="parsplice")
    want = cli("replay", "--trace", empty, "--format", "parsplice", "--cache-size", "10", "--json", "--quiet")
    assert r.requests == want["requests"] == 0 and r.miss_ratio == want["miss_ratio"]
    assert r.metrics.empty and "cache_objects" in r.metrics.columns
    a = mantle.analyze(empty, format="parsplice")
    assert a.summary["requests"] == 0 and a.fans.empty and a.mrc.empty
    assert list(mantle.TraceReader(empty, "parsplice")) == []
    assert mantle.Cache("lru", 10).process_trace(mantle.TraceReader(empty, "parsplice")) == (0.0, 0.0)


def test_a_record_stating_endless_work_raises_instead_of_running(tmp_path):
    """A 27-byte ARC line asks for 2^64 requests: analyze, replay and a TraceReader raise
    MantleError naming the file and line (the old reader ran out of memory and aborted)."""
    bomb = tmp_path / "bomb.lis"
    bomb.write_text("0 18446744073709551615 0 1\n")
    for run in (
        lambda: mantle.analyze(str(bomb)),
        lambda: mantle.replay(str(bomb), cache_size=100),
        lambda: list(mantle.TraceReader(str(bomb))),
    ):
        with pytest.raises(mantle.MantleError, match=r"bomb\.lis:1: .*limit of 1048576"):
            run()
    ranges = tmp_path / "ranges.lis"
    ranges.write_text("0 3 0 1\n100 4 0 2\n")
    with pytest.raises(mantle.MantleError, match=r"ranges\.lis:2: .*limit of 3"):
        list(mantle.TraceReader(str(ranges), max_record_requests=3))
    assert len(list(mantle.TraceReader(str(ranges), max_record_requests=4))) == 7
