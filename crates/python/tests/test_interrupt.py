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
