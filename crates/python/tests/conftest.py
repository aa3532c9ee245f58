"""Fixtures: the `mantle` binary the answers are checked against, and small generated traces
(never the real traces in ../shared, which CI may not have)."""

import json
import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _binary():
    candidates = [os.environ.get("MANTLE_BIN")]
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        candidates.append(str(Path(target) / "release" / "mantle"))
    candidates += [
        str(Path.home() / ".cache" / "mantle-target" / "release" / "mantle"),
        str(REPO / "target" / "release" / "mantle"),
        shutil.which("mantle"),
    ]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    return None


@pytest.fixture(scope="session")
def mantle_bin():
    path = _binary()
    if path is None:
        pytest.fail(
            "no mantle binary: build it (cargo build --release -p mantle-cli) or set MANTLE_BIN"
        )
    return path


@pytest.fixture(scope="session")
def cli(mantle_bin):
    """Runs `mantle ARGS`; returns the parsed JSON of --json output."""

    def run(*args):
        out = subprocess.run(
            [mantle_bin, *map(str, args)], capture_output=True, text=True, timeout=300
        )
        if out.returncode != 0:
            raise AssertionError(f"mantle {' '.join(map(str, args))}: {out.stderr}")
        return json.loads(out.stdout)

    return run


@pytest.fixture(scope="session")
def cli_error(mantle_bin):
    """Runs `mantle ARGS` that must fail; returns its stderr."""

    def run(*args):
        out = subprocess.run(
            [mantle_bin, *map(str, args)], capture_output=True, text=True, timeout=300
        )
        assert out.returncode != 0, f"mantle {' '.join(map(str, args))} succeeded"
        return out.stderr

    return run


@pytest.fixture(scope="session")
def traces(tmp_path_factory):
    import mantle

    d = tmp_path_factory.mktemp("traces")
    parsplice = d / "parsplice.csv"
    mantle.gen_parsplice(parsplice, seed=3, duration="20m")
    # Object sizes matter for byte miss ratios and byte capacities: an oracleGeneral file
    # (libCacheSim's binary format) with Zipf-like keys and sizes fixed per key.
    rng = random.Random(7)
    sizes = {k: rng.randint(1, 5000) for k in range(1, 4001)}
    sized = d / "sized.oracleGeneral.bin"
    with open(sized, "wb") as f:
        for i in range(60_000):
            key = min(int(rng.paretovariate(0.8)), 4000)
            f.write(struct.pack("<IQIq", i // 50, key, sizes[key], -1))
    return {"parsplice": parsplice, "sized": sized, "dir": d}
