"""mantle.zlog against real servers: a `mantle serve` on a random port (one node), and a
two-node cluster on a private etcd; the py example of docs/python.md runs as written
against a scratch server. Skipped, saying why, when the mantle binary (or etcd, for the
cluster) is not there."""

import os
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from conftest import REPO, _binary

from mantle import MantleError, zlog


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port, proc, log, within=20.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"port {port} never listened: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def mantle():
    path = _binary()
    if path is None:
        pytest.skip(
            "no mantle binary: build it (cargo build --release -p mantle-cli) or set MANTLE_BIN"
        )
    return path


class _Procs:
    def __init__(self):
        self.procs = []

    def start(self, args, log):
        proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=open(log, "wb")
        )
        self.procs.append(proc)
        return proc

    def stop(self):
        for proc in self.procs:
            proc.kill()
            proc.wait()


def _serve(procs, mantle, data_dir, port, log, extra=()):
    proc = procs.start(
        [mantle, "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}", *extra],
        log,
    )
    _wait_listening(port, proc, log)
    return proc


@pytest.fixture(scope="module")
def node(mantle, tmp_path_factory):
    """One `mantle serve`; its URL."""
    d = tmp_path_factory.mktemp("zlog-node")
    procs = _Procs()
    port = _free_port()
    try:
        _serve(procs, mantle, d / "data", port, d / "serve.log")
        yield f"redis://127.0.0.1:{port}"
    finally:
        procs.stop()


@pytest.fixture(scope="module")
def cluster(mantle, tmp_path_factory):
    """Two `mantle serve --cluster` nodes on a private etcd, the slots split between them;
    their URLs."""
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("no etcd on PATH: the cluster case needs one")
    d = tmp_path_factory.mktemp("zlog-cluster")
    procs = _Procs()
    client, peer = _free_port(), _free_port()
    try:
        e = procs.start(
            [
                etcd, "--name", "t1", "--data-dir", str(d / "etcd"),
                "--listen-client-urls", f"http://127.0.0.1:{client}",
                "--advertise-client-urls", f"http://127.0.0.1:{client}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"t1=http://127.0.0.1:{peer}",
                "--log-level", "error",
            ],
            d / "etcd.log",
        )
        _wait_listening(client, e, d / "etcd.log")
        address = f"etcd://127.0.0.1:{client}"
        ports = []
        for n in ("n1", "n2"):
            port = _free_port()
            _serve(
                procs, mantle, d / n, port, d / f"{n}.log",
                ["--cluster", address, "--cluster-name", "pylog", "--node-id", n,
                 "--cluster-ttl", "2s", "--log-replicas", "2"],
            )
            ports.append(port)
        _wait_for(ports[0], "CLUSTER", "INFO", text="cluster_known_nodes:2")
        out = subprocess.run(
            [mantle, "cluster", "--etcd", address, "--name", "pylog", "rebalance"],
            capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
    except BaseException:
        procs.stop()
        raise
    try:
        for port in ports:
            _wait_for(port, "CLUSTER", "INFO", text="cluster_size:2")
        yield [f"redis://127.0.0.1:{p}" for p in ports]
    finally:
        procs.stop()


def _resp(port, *args):
    """One command over a raw socket (the package has no Redis client): its reply's text."""
    parts = [f"*{len(args)}\r\n"] + [f"${len(str(a))}\r\n{a}\r\n" for a in args]
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall("".join(parts).encode())
        time.sleep(0.05)
        return s.recv(65536).decode(errors="replace")


def _wait_for(port, *command, text, within=20.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if text in _resp(port, *command):
            return
        time.sleep(0.1)
    raise AssertionError(f"{' '.join(command)} on port {port} never said {text!r}")


def _exercise(log):
    """The whole API on an open log; checks what each call returns."""
    assert log.replicas == 2 and log.stripes == 16
    start = log.tail()
    a = log.append(b"first")
    b = log.append(b"second")
    assert (a, b) == (start, start + 1)
    assert log.read(a) == b"first" and log.read(b) == b"second"
    assert log.tail() == start + 2
    # A batch of three, one written, one left a hole and filled, one never touched.
    batch = log.next(3)
    assert isinstance(batch, zlog.Positions)
    assert (batch.first, batch.count) == (start + 2, 3)
    assert list(batch.positions) == [start + 2, start + 3, start + 4]
    assert log.write_at(batch.epoch, batch.first, b"reserved")
    assert log.read(batch.first) == b"reserved"
    assert log.read(batch.first + 1) is None
    log.fill(batch.first + 1)
    log.fill(batch.first + 1)  # idempotent
    assert log.read(batch.first + 1) is zlog.FILLED
    assert not log.read(batch.first + 1)
    with pytest.raises(zlog.Written):
        log.fill(batch.first)
    assert log.read(batch.first) == b"reserved"
    # A second write at a taken position is refused: the position is lost, not overwritten.
    assert not log.write_at(batch.epoch, batch.first, b"again")
    log.trim(b)
    assert log.read(b) is zlog.TRIMMED
    log.trim_to(b)
    assert log.read(a) is zlog.TRIMMED
    assert log.read(batch.first) == b"reserved"
    assert log.epoch >= 1
    return batch


def test_one_node(node):
    log = zlog.Log.open(node, "orders")
    assert log.name == "orders"
    _exercise(log)
    # A second client sees the same log.
    other = zlog.Log.open(node, "orders")
    pos = other.append(b"from another client")
    assert log.read(pos) == b"from another client"
    assert "orders" in repr(log)


def test_cluster(cluster):
    log = zlog.Log.open_cluster(cluster, "events", deadline=20)
    _exercise(log)
    # Every node can be the way in.
    for url in cluster:
        assert zlog.Log.open_cluster([url], "events").tail() == log.tail()


def test_concurrent_appenders_never_share_a_position(node):
    positions, errors = [], []

    def append(i):
        try:
            log = zlog.Log.open(node, "shared")
            for j in range(50):
                positions.append(log.append(f"{i}-{j}".encode()))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(positions) == len(set(positions)) == 200


def test_errors_are_mantle_errors(mantle):
    assert issubclass(zlog.Unavailable, MantleError)
    assert issubclass(zlog.Written, MantleError)
    assert issubclass(zlog.Refused, MantleError)
    # Nobody listens there: the deadline bounds the wait.
    port = _free_port()
    with pytest.raises(zlog.Unavailable):
        zlog.Log.open(f"redis://127.0.0.1:{port}", "nowhere", deadline=0.5)
    with pytest.raises(MantleError, match="deadline"):
        zlog.Log.open(f"redis://127.0.0.1:{port}", "nowhere", deadline=-1)
    with pytest.raises(MantleError, match="at least one"):
        zlog.Log.open_cluster([], "nowhere")


def test_python_md_zlog_example_runs(mantle, tmp_path):
    """The py block of docs/python.md's shared-log section, against a scratch server on
    the port it names (rewritten to a free one)."""
    page = (REPO / "docs" / "python.md").read_text()
    blocks = re.findall(r"^```py\n(.*?)^```", page, flags=re.S | re.M)
    assert blocks, "docs/python.md has no py block (the shared-log example)"
    port = _free_port()
    procs = _Procs()
    try:
        _serve(procs, mantle, tmp_path / "data", port, tmp_path / "serve.log")
        for block in blocks:
            code = block.replace("6391", str(port))
            exec(compile(code, "docs/python.md", "exec"), {"__name__": "__docs__"})
    finally:
        procs.stop()
