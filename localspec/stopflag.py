"""StopFlag: the one piece of state a frontend shares with a running decoding loop.

It lives at the bottom of the import graph (imports nothing of localspec) so that loops in
`decode/` can poll it and `session.py` can hand it out without an import circle.
"""

from __future__ import annotations

import threading


class StopFlag:
    """Thread-safe flag the frontend raises (Esc, Ctrl-C, a closed HTTP stream) and loops
    poll between iterations: a generation ends within one iteration of `set()`."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()
