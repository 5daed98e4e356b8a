"""StopFlag: the one piece of state a frontend shares with a running decoding loop.

It lives at the bottom of the import graph (imports nothing of localspec) so that loops in
`decode/` can poll it and `session.py` can hand it out without an import circle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class StopFlag:
    """Thread-safe flag the frontend raises (Esc, Ctrl-C, a closed HTTP stream) and loops
    poll between iterations: a generation ends within one iteration of `set()`."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._on_set: list[Callable[[], None]] = []

    def set(self) -> None:
        self._event.set()
        for fn in list(self._on_set):
            fn()

    def on_set(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call `fn` when the flag is raised (now, if it is), from the raising thread: how a
        stop reaches code that cannot poll (a decode inside llama.cpp: Context.abortable).
        Returns the function that removes it."""
        self._on_set.append(fn)
        if self.is_set():
            fn()
        return lambda: self._on_set.remove(fn)

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()
