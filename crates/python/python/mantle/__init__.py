"""Mantle from Python: trace replay, caches, workload analysis and Lua policies.

Every figure comes from the Mantle crates (the native module ``mantle._mantle``); this file
only turns their results into Python objects and pandas DataFrames. Long runs release the
GIL. Bad input raises :class:`MantleError` with the message the ``mantle`` command prints.

    >>> import mantle
    >>> r = mantle.replay("trace.csv", cache_size="10%", eviction="s3fifo")
    >>> r.miss_ratio, r.metrics.tail()
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from ._mantle import Cache, MantleError, Setup, TraceReader
from ._mantle import CommonCacheParams, PluginAdmissioner, PluginCache, Request
from . import _mantle

__all__ = [
    "Analysis",
    "Cache",
    "CommonCacheParams",
    "MantleError",
    "PluginAdmissioner",
    "PluginCache",
    "PolicyCheck",
    "ReplayResult",
    "Request",
    "TraceReader",
    "analyze",
    "check_policy",
    "compare",
    "gen_parsplice",
    "mrc",
    "replay",
]

PathLike = Union[str, "os.PathLike[str]"]
Trace = Union[PathLike, TraceReader]


def _pandas():
    # Imported on first use so the package loads (and Cache/TraceReader work) without pandas.
    import pandas

    return pandas


class ReplayResult:
    """The result of one replay: every key of ``mantle replay --json`` as an attribute
    (``miss_ratio``, ``backend``, ``policy``, ``warmup``, ...), plus ``metrics``, the per-tick
    series (the columns of ``--metrics-out``) as a pandas DataFrame."""

    def __init__(self, label: str, report: dict, ticks: list):
        self.label = label
        self._report = report
        self._ticks = ticks
        self._metrics = None

    def __getattr__(self, name: str) -> Any:
        report = self.__dict__.get("_report", {})
        if name in report:
            return report[name]
        raise AttributeError(f"ReplayResult has no attribute {name!r}")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._report))

    @property
    def metrics(self):
        if self._metrics is None:
            pd = _pandas()
            # Columns in the order --metrics-out writes them (TickRow's fields).
            self._metrics = pd.DataFrame(self._ticks) if self._ticks else pd.DataFrame(
                columns=["tick", "time", "requests", "cache_objects", "cache_bytes"]
            )
        return self._metrics

    def to_dict(self) -> dict:
        """The ``replay --json`` object."""
        return dict(self._report)

    def keys(self):
        return self._report.keys()

    def __repr__(self) -> str:
        r = self._report
        return (
            f"<mantle.ReplayResult {self.label!r}: {r['requests']} requests, "
            f"miss ratio {r['miss_ratio']:.6f}, byte miss ratio {r['byte_miss_ratio']:.6f}>"
        )


def _result(raw: dict) -> ReplayResult:
    for notice in raw["notices"]:
        warnings.warn(notice, RuntimeWarning, stacklevel=3)
    return ReplayResult(raw["label"], json.loads(raw["json"]), json.loads(raw["ticks"]))


def replay(
    trace: Trace,
    cache_size: Union[int, str],
    *,
    eviction: str = "lru",
    policy: Optional[PathLike] = None,
    params: Optional[Mapping[str, Any]] = None,
    tick: Union[None, str, float] = None,
    classes: Optional[PathLike] = None,
    restart_at: Union[None, int, str] = None,
    warmup: Optional[str] = None,
    format: Optional[str] = None,
    **more: Any,
) -> ReplayResult:
    """Replays ``trace`` as ``mantle replay`` does.

    ``cache_size``: objects (``1000``), bytes with a unit (``"64MiB"``), a percentage of the
    working set (``"10%"``) or ``"unlimited"``. ``eviction``: lru, fifo, clock, sieve,
    s3fifo. ``policy``: a Lua policy file, with ``params`` (``{"k": 2}``). ``tick``: ``"1s"``,
    ``"1000ops"`` or seconds. ``classes``: a class file. ``restart_at`` (``N`` or ``"P%"``)
    and ``warmup`` (``"lastk:100%"`` ...): a restart and its warm-up. Also accepted:
    ``backend``, ``label``, ``policy_instructions``, ``policy_memory``, ``timeseries``,
    ``region``, ``warmup_window``, ``monitor_limit``, ``warmup_seed``, and ``max_cache_size``
    (a ceiling a policy cannot lift; its cuts are counted in ``capacity_clamps``).
    """
    setup = Setup(
        cache_size, eviction=eviction, policy=policy, params=params, tick=tick,
        classes=classes, restart_at=restart_at, warmup=warmup, **more,
    )
    return _result(_mantle.replay_json(trace, setup, format))


def compare(
    trace: Trace,
    setups: Sequence[Mapping[str, Any]],
    *,
    jobs: Optional[int] = None,
    format: Optional[str] = None,
    results: bool = False,
):
    """Replays ``trace`` under every setup (each a dict of :func:`replay`'s keyword arguments,
    optionally with a ``label``), in parallel, and returns a DataFrame with one row per setup:
    ``label`` and every scalar of ``replay --json`` (nested objects flattened as
    ``backend.reads``, ``policy.ticks``...). With ``results=True`` returns
    ``(frame, [ReplayResult, ...])`` so the per-tick series are at hand too."""
    built = []
    for i, s in enumerate(setups):
        s = dict(s)
        if "cache_size" not in s:
            raise MantleError(f"setups[{i}]: cache_size is required")
        built.append(Setup(s.pop("cache_size"), **s))
    raws = _mantle.compare_json(trace, built, jobs, format)
    outs = [_result(raw) for raw in raws]
    pd = _pandas()
    rows = []
    for r in outs:
        row = {"label": r.label}
        row.update(r.to_dict())
        rows.append(row)
    frame = pd.json_normalize(rows, max_level=1)
    # Lists (per-class rows, warm-up windows) stay in the ReplayResults.
    frame = frame[[c for c in frame.columns
                   if not any(isinstance(v, (list, dict)) for v in frame[c])]]
    return (frame, outs) if results else frame


class Analysis:
    """``mantle analyze``'s results: ``summary`` (a dict of the scalar figures), and
    DataFrames ``fans``, ``regimes``, ``mrc`` (LRU miss-ratio curve) and ``series`` (the
    time series); ``raw`` is the whole ``analyze --json`` object."""

    def __init__(self, raw: dict):
        pd = _pandas()
        self.raw = raw
        self.summary = {k: v for k, v in raw.items() if not isinstance(v, (dict, list))}
        for group in ("popularity", "reuse"):
            for k, v in raw.get(group, {}).items():
                if not isinstance(v, (dict, list)):
                    self.summary[f"{group}.{k}"] = v
        for group in ("mrc", "fans", "regimes"):
            for k, v in raw[group].items():
                if not isinstance(v, (dict, list)):
                    self.summary[f"{group}.{k}"] = v
        def frame(rows, columns):
            # Columns from the data when there is any (new fields show up), else these.
            return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)

        self.fans = frame(raw["fans"]["fans"], ["start", "end", "bottom", "top", "keys", "accesses"])
        self.regimes = frame(raw["regimes"]["regimes"], ["start", "end", "mean_read_rate"])
        self.mrc = frame(raw["mrc"]["points"], ["cache_size", "miss_ratio"])
        self.series = pd.DataFrame(raw["series"])

    def __getattr__(self, name: str) -> Any:
        summary = self.__dict__.get("summary", {})
        if name in summary:
            return summary[name]
        raise AttributeError(f"Analysis has no attribute {name!r}")

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"<mantle.Analysis: {s['requests']} requests, {s['unique_keys']} keys, "
            f"{len(self.fans)} fans, {len(self.regimes)} regimes>"
        )


def analyze(
    trace: Trace,
    *,
    window: Union[None, float, str] = None,
    regimes: int = 4,
    mrc_max_keys: int = 1 << 22,
    format: Optional[str] = None,
) -> Analysis:
    """Analyses ``trace`` as ``mantle analyze`` does (``window``: seconds or ``"5m"``)."""
    return Analysis(json.loads(_mantle.analyze_json(trace, format, window, regimes, mrc_max_keys)))


def mrc(
    trace: Trace,
    algorithms: Union[str, Sequence[str]] = ("lru",),
    *,
    sizes: Optional[Sequence[Union[int, str]]] = None,
    points: int = 20,
    unit: str = "objects",
    method: str = "exact",
    sample_rate: float = 0.01,
    jobs: Optional[int] = None,
    format: Optional[str] = None,
):
    """Miss-ratio curves of ``algorithms`` (names, or ``"all"``) as ``mantle analyze --mrc``
    computes them: a DataFrame with ``algorithm``, ``cache_size``, ``miss_ratio`` and
    ``method`` (exact, shards or miniature). ``sizes``: objects or bytes as ``unit`` says
    (``"objects"`` or ``"bytes"``), or percentages (``"10%"``); default ``points`` sizes
    log-spaced from 0.1% to 100% of the working set. ``method="sampled"`` serves only
    ``sample_rate`` of the keys. The frame's ``attrs`` hold ``unit``, ``sample_rate`` and
    ``wall_seconds``."""
    if isinstance(algorithms, str):
        algorithms = [algorithms]
    raw = json.loads(_mantle.mrc_json(
        trace, list(algorithms), None if sizes is None else list(sizes), points, unit,
        method, sample_rate, jobs, format,
    ))
    pd = _pandas()
    rows = [
        {"algorithm": c["algorithm"], "cache_size": p["cache_size"],
         "miss_ratio": p["miss_ratio"], "method": c["method"]}
        for c in raw["curves"] for p in c["points"]
    ]
    frame = pd.DataFrame(rows, columns=["algorithm", "cache_size", "miss_ratio", "method"])
    for key in ("unit", "sample_rate", "wall_seconds", "working_set_objects", "working_set_bytes"):
        frame.attrs[key] = raw[key]
    return frame


class PolicyCheck:
    """What ``mantle policy check`` reports: ``ok``, ``callbacks``, ``problems`` as
    ``(line, message)`` pairs; ``str()`` is the CLI's text."""

    def __init__(self, raw: dict):
        self.file = raw["file"]
        self.ok = raw["ok"]
        self.callbacks = list(raw["callbacks"])
        self.ceph_dialect = raw["ceph_dialect"]
        self.problems = [tuple(p) for p in raw["problems"]]
        self._text = raw["text"]

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"<mantle.PolicyCheck {self.file!r} ok={self.ok} problems={len(self.problems)}>"


def check_policy(
    path: PathLike, *, max_instructions: Optional[int] = None, max_memory: Optional[int] = None
) -> PolicyCheck:
    """Compiles and lints a policy as ``mantle policy check`` does. A missing file raises
    :class:`MantleError`; a policy with problems returns ``ok=False``."""
    return PolicyCheck(_mantle.check_policy(path, max_instructions, max_memory))


def gen_parsplice(
    output: PathLike,
    *,
    seed: int = 1,
    duration: Union[None, float, str] = None,
    workers: int = 28,
    growth_rate: float = 1.0,
    temperature: float = 1.0,
    start_time: int = 0,
) -> dict:
    """Writes a ParSplice-like trace as ``mantle gen parsplice`` does (zstd when ``output``
    ends in .zst); ``duration`` in seconds or ``"90m"`` (default 1h). Returns its totals."""
    return _mantle.gen_parsplice(
        output, seed=seed, duration=duration, workers=workers, growth_rate=growth_rate,
        temperature=temperature, start_time=start_time,
    )
