"""Ctrl-C in `localspec run`, from the first model load to the last free.

Python raises KeyboardInterrupt wherever the main thread happens to run Python code. While
llama.cpp loads or frees a model that is its log callback, where ctypes prints the
exception as a traceback and drops it (the load went on and the run answered with exit
0; a press while freeing printed a traceback). So `run` keeps SIGINT to itself for as
long as it holds a model:

- the first press asks the session to stop: a load in flight ends, then nothing is
  generated; a generation ends after its current iteration. What was produced is printed
  as usual (the --json line says "interrupted") and the exit code is 130;
- a second press raises KeyboardInterrupt (abort at once); inside a llama.cpp call it is
  kept by backend/logs.py and raised as soon as the call returns;
- once the answer is out and the models are being freed, a press only makes the exit
  code 130: nothing is left to stop, and an exception there could only be a traceback.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class CtrlC:
    """The SIGINT handler of one `run` (the module docstring); `pressed` counts presses."""

    def __init__(self) -> None:
        self.pressed = 0
        self.session: Any = None  # set once loaded: the first press stops its generation
        self.closing = False  # the models are being freed: a press is only counted

    def __call__(self, signum: int, frame: object) -> None:
        self.pressed += 1
        if self.closing:
            return
        if self.pressed == 1:
            if self.session is not None:
                self.session.stop()
            return
        raise KeyboardInterrupt


@contextmanager
def ctrl_c_stops() -> Iterator[CtrlC]:
    """Install a CtrlC for the block (the main thread only: signals reach nothing else)."""
    handler = CtrlC()
    if threading.current_thread() is not threading.main_thread():
        yield handler
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGINT, previous)


def close_session(sess: Any) -> None:
    """Free the session's contexts and models now, while Ctrl-C is only counted, rather than
    whenever the last reference goes (at exit, under Python's default handler)."""
    sess.close()
    for model in (getattr(sess, "target_model", None), getattr(sess, "draft_model", None)):
        if model is not None:
            model.close()
