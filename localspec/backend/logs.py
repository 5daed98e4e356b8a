"""Silence llama.cpp's logging unless --verbose: its load chatter would drown the answer.

The callback is also where Ctrl-C lands during a model load or free: llama.cpp logs all
along (a dot per loaded chunk, a line per freed buffer), so that is the Python code the
main thread runs when SIGINT arrives, and Python's KeyboardInterrupt is raised there. An
exception inside a ctypes callback cannot reach the caller: ctypes prints it as a
traceback ("Exception ignored on calling ctypes callback function") and drops it, so the
load went on and `run` answered as if nothing was pressed (issue 43). The interrupt is
therefore kept here, without a traceback, and `raise_pending()` raises it once the C call
returned (a caller that loads or frees calls it after the call).
"""

from __future__ import annotations

import ctypes
import sys

import llama_cpp

_state = {"verbose": False, "installed": False, "interrupted": False}


def _log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    if _state["verbose"]:
        try:
            sys.stderr.write(text.decode("utf-8", errors="replace"))
        except Exception:  # noqa: BLE001 - a logging callback must never raise into C
            pass


_log_callback = llama_cpp.llama_log_callback(_log)
_previous_hook = sys.unraisablehook


def _unraisable(args) -> None:  # noqa: ANN001 - sys.UnraisableHookArgs is not importable as a type
    """A KeyboardInterrupt that ctypes dropped in our callback: kept for raise_pending
    (raised as the callback starts, it is out of reach of any try inside it)."""
    if args.object is _log and args.exc_type is not None and issubclass(args.exc_type, KeyboardInterrupt):
        _state["interrupted"] = True
        return
    _previous_hook(args)


def raise_pending() -> None:
    """Raise the KeyboardInterrupt that arrived during a llama.cpp call, if one did (once)."""
    if _state["interrupted"]:
        _state["interrupted"] = False
        raise KeyboardInterrupt


def install() -> None:
    """Install the callback (quiet unless configured verbose) before ggml's first call:
    backends log while the registry starts (a Vulkan build with no device says "No devices
    found" on every start), and that must not reach a user who did not ask for -v."""
    configure_logging(_state["verbose"])


def configure_logging(verbose: bool) -> None:
    """Install the callback once (it must stay referenced) and set the verbosity."""
    global _previous_hook
    _state["verbose"] = verbose
    if not _state["installed"]:
        if sys.unraisablehook is not _unraisable:
            _previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
        # the callback first: llama_backend_init may start ggml's backend registry, and the
        # backends log as they start
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _state["installed"] = True
