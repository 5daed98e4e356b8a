"""Session: the one object frontends (CLI, TUI, bench) use to generate.

Frontends never touch the backend; they open a Session (which loads the models) and iterate
over the events of `chat()` or `complete()`. A Session keeps the conversation and both KV
caches across turns, so turn 2 only evaluates its own new tokens.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from localspec.config import GenConfig
from localspec.events import Event

ProgressFn = Callable[[str, float], None]
"""progress(message, fraction in [0, 1]) for long steps (fetch, load, calibration)."""


@dataclass
class SessionOptions:
    """How the models are loaded (not per-generation settings)."""

    n_ctx: int = 4096
    n_batch: int = 512
    threads: int | None = None
    verbose: bool = False
    n_seq_max: int = 16


class StopFlag:
    """Thread-safe flag the frontend raises (Esc, Ctrl-C) and loops poll between iterations."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()


def open_session(
    target: str,
    draft: str | None = None,
    options: SessionOptions | None = None,
    progress: ProgressFn | None = None,
) -> Session:
    """Resolve (fetching if needed) and load target and draft; check their vocabularies."""
    from localspec.runtime import load_session

    return load_session(target, draft, options or SessionOptions(), progress)


class Session:
    """Interface implemented by localspec.runtime.RuntimeSession (and by test fakes)."""

    target_name: str
    draft_name: str | None

    def chat(self, user_text: str, cfg: GenConfig) -> Iterator[Event]:
        """Append a user turn, generate the assistant turn; the last event is Done."""
        raise NotImplementedError

    def complete(self, prompt: str, cfg: GenConfig, *, chat: bool = True) -> Iterator[Event]:
        """One-shot generation on a fresh conversation (chat-templated unless chat=False)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Ask the running generation to end after the current iteration (thread-safe)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget the conversation (and the KV caches)."""
        raise NotImplementedError

    def close(self) -> None:
        """Free the models."""
