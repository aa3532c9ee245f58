"""Ctrl-C stops a long run that released the GIL, instead of waiting for its end.

The trace is a named pipe fed by a thread: after 200,000 requests it interrupts the main
thread (as Ctrl-C does) and goes on writing up to 3M. A run that honours the interrupt stops
reading, so the writer's pipe breaks early; one that ignores it reads all 3M before the
interrupt is raised."""

import _thread
import os
import signal
import threading

import pytest

import mantle

TOTAL = 3_000_000
INTERRUPT_AT = 200_000


def feed(path, sent):
    try:
        with open(path, "w") as f:
            while sent[0] < TOTAL:
                f.write("".join(f"{k}\n" for k in range(sent[0], sent[0] + 10_000)))
                sent[0] += 10_000
                if sent[0] == INTERRUPT_AT:
                    _thread.interrupt_main()
    except BrokenPipeError:
        pass


@pytest.fixture
def ctrl_c_handler():
    """Python's own SIGINT handler for the test. A process a shell without job control starts
    in the background inherits SIGINT ignored; Python then installs no handler and
    interrupt_main() does nothing, whatever the package does."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    "run",
    [
        lambda p: mantle.replay(p, cache_size=100, format="txt"),
        lambda p: mantle.Cache("lru", 100).process_trace(p),
        lambda p: mantle.analyze(p, format="txt"),
    ],
    ids=["replay", "process_trace", "analyze"],
)
def test_ctrl_c_stops_a_run_reading_a_trace(tmp_path, run, ctrl_c_handler):
    pipe = tmp_path / "trace.txt"
    os.mkfifo(pipe)
    sent = [0]
    writer = threading.Thread(target=feed, args=(pipe, sent), daemon=True)
    writer.start()
    with pytest.raises(KeyboardInterrupt):
        run(str(pipe))
    writer.join(timeout=60)
    assert not writer.is_alive()
    assert sent[0] < TOTAL


def feed_every_open(path, sent, stop):
    """Serves each open of the pipe (compare opens the trace once to check it, then once per
    replay): writes keys until the reader goes away or TOTAL have been sent in all, then an
    empty trace to any later reader. Interrupts the main thread once, at INTERRUPT_AT."""
    interrupted = False
    while not stop.is_set():
        try:
            with open(path, "w") as f:
                while sent[0] < TOTAL:
                    f.write("".join(f"{k}\n" for k in range(sent[0], sent[0] + 10_000)))
                    sent[0] += 10_000
                    if sent[0] >= INTERRUPT_AT and not interrupted:
                        interrupted = True
                        _thread.interrupt_main()
        except BrokenPipeError:
            pass


def test_ctrl_c_stops_compare(tmp_path, ctrl_c_handler):
    """compare replays on worker threads, where Python delivers no signals; the calling
    thread must watch for Ctrl-C and stop them, not wait for every replay to end."""
    pipe = tmp_path / "trace.txt"
    os.mkfifo(pipe)
    sent = [0]
    stop = threading.Event()
    writer = threading.Thread(target=feed_every_open, args=(pipe, sent, stop), daemon=True)
    writer.start()
    setups = [{"cache_size": 100, "eviction": e} for e in ("lru", "fifo")]
    try:
        with pytest.raises(KeyboardInterrupt):
            mantle.compare(str(pipe), setups, jobs=1, format="txt")
        assert sent[0] < TOTAL
    finally:
        stop.set()
        # A writer waiting in open() for a reader needs one to return.
        for _ in range(600):
            if not writer.is_alive():
                break
            os.close(os.open(pipe, os.O_RDONLY | os.O_NONBLOCK))
            writer.join(timeout=0.1)
        assert not writer.is_alive()
