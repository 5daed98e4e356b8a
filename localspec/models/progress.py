"""Progress bars for every long step (download, assembly, hashing, quantize).

One helper so all bars look alike, go to stderr (stdout stays clean for `models path`),
and vanish entirely with progress=False (tests, --quiet, JSON output).

A full-screen frontend (the TUI) cannot let anything paint on the terminal it owns: inside
`reporting(fn)` every bar and note becomes a call fn(message, fraction) instead, which the
TUI shows as its own progress bar. The capture is process-wide (a model is fetched by one
thread at a time; the fetch lock serialises the rest), so the TUI's loader thread and the
fetchers' helper threads all report to the same place.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from tqdm import tqdm

Reporter = Callable[[str, float], None]
"""reporter(message, fraction in [0, 1]): the Session's ProgressFn signature."""

_lock = threading.Lock()
_reporters: list[Reporter] = []
_last_fraction = 0.0


def fmt_bytes(n: float | None) -> str:
    """1536 -> '1.5 KB', 1.2e9 -> '1.12 GB' (binary units, as the bars use)."""
    if n is None:
        return "?"
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}" if unit == "GB" else f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def current_reporter() -> Reporter | None:
    """The innermost active reporter (None: bars and notes go to stderr)."""
    with _lock:
        return _reporters[-1] if _reporters else None


@contextlib.contextmanager
def reporting(fn: Reporter) -> Iterator[None]:
    """Route every bar and note to fn(message, fraction) while the block runs.

    Also tells subprocesses (pip) to stay quiet: their output is captured, never painted.
    """
    with _lock:
        _reporters.append(fn)
    try:
        yield
    finally:
        with _lock:
            _reporters.remove(fn)


def _report(fn: Reporter, message: str, fraction: float | None) -> None:
    global _last_fraction
    if fraction is not None:
        _last_fraction = max(0.0, min(1.0, fraction))
    with contextlib.suppress(Exception):  # a broken reporter must not break a download
        fn(message, _last_fraction)


class ReportedBar:
    """The slice of tqdm's API the fetchers use, reported to a Reporter (throttled).

    Why not tqdm with a custom file: tqdm writes carriage-return frames meant for a
    terminal; a reporter wants (message, fraction) pairs it can show its own way.
    """

    def __init__(self, total: int | None, desc: str, fn: Reporter, unit: str = "B",
                 interval: float = 0.2) -> None:
        self.total = total
        self.desc = desc
        self.n = 0
        self.unit = unit
        self._fn = fn
        self._interval = interval
        self._last = 0.0
        self._said = ""

    def _message(self) -> str:
        if self.unit == "B":
            done = fmt_bytes(self.n) + (f" of {fmt_bytes(self.total)}" if self.total else "")
        else:
            done = f"{self.n}" + (f"/{self.total}" if self.total else "") + f" {self.unit}"
        return f"{self.desc}: {done}"

    def _emit(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self._interval:
            message = self._message()
            if message == self._said and not force:
                return
            self._last, self._said = now, message
            frac = self.n / self.total if self.total else None
            _report(self._fn, message, frac)

    def update(self, n: int = 1) -> None:
        self.n += n
        self._emit(force=bool(self.total) and self.n >= (self.total or 0))

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self.desc = desc
        self._emit(force=refresh)

    def refresh(self) -> None:
        self._emit(force=True)

    def close(self) -> None:
        self._emit(force=True)

    def __enter__(self) -> ReportedBar:
        self._emit(force=True)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def bar(total: int | None, desc: str, enabled: bool = True, unit: str = "B") -> Any:
    """A byte-scaled tqdm bar on stderr; off when disabled or stderr is not a terminal.

    Inside `reporting(fn)` (and enabled) it is a ReportedBar feeding fn instead.
    """
    fn = current_reporter()
    if enabled and fn is not None:
        return ReportedBar(total, desc, fn, unit)
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B",
                unit_divisor=1024 if unit == "B" else 1000, disable=None if enabled else True,
                file=sys.stderr, dynamic_ncols=True, leave=False, mininterval=0.5)


def bars_visible(enabled: bool = True) -> bool:
    """Whether bar() will show anything (a reporter, or a terminal on stderr)."""
    if not enabled:
        return False
    return current_reporter() is not None or sys.stderr.isatty()


def note(message: str, enabled: bool = True) -> None:
    """A one-line status message on stderr (shown when progress is shown)."""
    if not enabled:
        return
    fn = current_reporter()
    if fn is not None:
        _report(fn, message, None)
    else:
        tqdm.write(message, file=sys.stderr)


class HashingWriter:
    """Write-through file wrapper that hashes and counts bytes as they are written.

    Assembling a model from parts hashes it on the way in, so a 1 GB file is not read a
    second time just to compute its sha256.
    """

    def __init__(self, fh: IO[bytes], pbar: Any = None) -> None:
        self.fh = fh
        self.pbar = pbar
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.fh.write(data)
        self.sha.update(data)
        self.size += len(data)
        if self.pbar is not None:
            self.pbar.update(len(data))
        return len(data)

    def copy_from(self, src: IO[bytes], chunk: int = 4 << 20) -> int:
        n = 0
        while data := src.read(chunk):
            n += self.write(data)
        return n

    def hexdigest(self) -> str:
        return self.sha.hexdigest()
