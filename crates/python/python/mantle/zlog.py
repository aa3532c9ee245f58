"""A Mantle shared log (CORFU/ZLog, docs/shared-log.md) from Python.

A thin layer over the Rust client (``crates/zlog``, the native ``mantle._mantle.SharedLog``):
the same calls, the same recovery (a sequencer that died is rebuilt by sealing the log's
storage at a newer epoch), the same retries through failovers. It only turns what a
position holds into Python values:

- ``read(pos)`` returns the entry's ``bytes``; ``None`` if nothing was written there (yet);
  :data:`FILLED` for a hole invalidated by ``fill``; :data:`TRIMMED` for a trimmed one.
- Failures raise :class:`Unavailable` (no answer within the deadline), :class:`Written`
  (``fill`` of a position that holds data) or :class:`Refused`; all are
  :class:`mantle.MantleError`.

    >>> from mantle import zlog
    >>> log = zlog.Log.open("redis://127.0.0.1:6379", "orders")
    >>> pos = log.append(b"first order")
    >>> log.read(pos)
    b'first order'
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Union

from ._mantle import LogRefused as Refused
from ._mantle import LogUnavailable as Unavailable
from ._mantle import LogWritten as Written
from ._mantle import SharedLog as _SharedLog

__all__ = [
    "FILLED",
    "TRIMMED",
    "Hole",
    "Log",
    "Positions",
    "Refused",
    "Unavailable",
    "Written",
]


class Hole:
    """What a position holds when it has no entry to give: :data:`FILLED` or
    :data:`TRIMMED` (compare with ``is``)."""

    __slots__ = ("kind",)

    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self) -> str:
        return f"mantle.zlog.{self.kind.upper()}"

    def __bool__(self) -> bool:
        # No entry: a loop `if entry:` skips holes as it skips None.
        return False


FILLED = Hole("filled")
TRIMMED = Hole("trimmed")

_KINDS = {"filled": FILLED, "trimmed": TRIMMED, "not_written": None}


class Positions(NamedTuple):
    """Positions reserved by :meth:`Log.next`: ``first .. first + count - 1``, valid at
    ``epoch`` (pass it to :meth:`Log.write_at`)."""

    epoch: int
    first: int
    count: int

    @property
    def positions(self) -> range:
        return range(self.first, self.first + self.count)


Entry = Union[bytes, Hole, None]


class Log:
    """An open shared log. ``Log.open(url, name)`` on one node (``redis://HOST:PORT``),
    ``Log.open_cluster([url, ...], name)`` on a cluster; a log is created on first use.
    ``deadline`` (seconds, default 30) bounds how long one call retries through failures."""

    def __init__(self, native: _SharedLog):
        self._log = native

    @classmethod
    def open(cls, url: str, name: str, *, deadline: Optional[float] = None) -> "Log":
        return cls(_SharedLog.open(url, name, deadline=deadline))

    @classmethod
    def open_cluster(
        cls, urls: Sequence[str], name: str, *, deadline: Optional[float] = None
    ) -> "Log":
        if isinstance(urls, str):
            urls = [urls]
        return cls(_SharedLog.open_cluster(list(urls), name, deadline=deadline))

    @property
    def name(self) -> str:
        return self._log.name

    @property
    def epoch(self) -> int:
        """The newest sequencer epoch this client has seen."""
        return self._log.epoch

    @property
    def replicas(self) -> int:
        return self._log.replicas

    @property
    def stripes(self) -> int:
        return self._log.stripes

    def append(self, data: bytes) -> int:
        """Appends ``data``; its position, once every replica holds it."""
        return self._log.append(bytes(data))

    def read(self, pos: int) -> Entry:
        """The entry at ``pos`` (bytes), ``None`` if never written, :data:`FILLED` or
        :data:`TRIMMED`."""
        kind, data = self._log.read(pos)
        return data if kind == "data" else _KINDS[kind]

    def tail(self) -> int:
        """The position the next append gets (CheckTail)."""
        return self._log.tail()

    def next(self, count: int = 1) -> Positions:
        """Reserves ``count`` positions in one round trip; write them with
        :meth:`write_at`."""
        return Positions(*self._log.next(count))

    def write_at(self, epoch: int, pos: int, data: bytes) -> bool:
        """Writes ``data`` at a position reserved by :meth:`next`. False: the position
        was lost (filled by a reader, a newer epoch, a replica's node gone); reserve
        another."""
        return self._log.write_at(epoch, pos, bytes(data))

    def fill(self, pos: int) -> None:
        """Invalidates ``pos`` if nothing was written there; raises :class:`Written` if
        something was (the data stays)."""
        self._log.fill(pos)

    def trim(self, pos: int) -> None:
        self._log.trim(pos)

    def trim_to(self, pos: int) -> None:
        """Trims every position below ``pos``."""
        self._log.trim_to(pos)

    def __repr__(self) -> str:
        return f"mantle.zlog.Log({self.name!r}, epoch={self.epoch})"
