"""Silence llama.cpp's logging unless --verbose: its load chatter would drown the answer."""

from __future__ import annotations

import ctypes
import sys

import llama_cpp

_state = {"verbose": False, "installed": False}


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    if _state["verbose"]:
        try:
            sys.stderr.write(text.decode("utf-8", errors="replace"))
        except Exception:  # noqa: BLE001 - a logging callback must never raise into C
            pass


def install() -> None:
    """Install the callback (quiet unless configured verbose) before ggml's first call:
    backends log while the registry starts (a Vulkan build with no device says "No devices
    found" on every start), and that must not reach a user who did not ask for -v."""
    configure_logging(_state["verbose"])


def configure_logging(verbose: bool) -> None:
    """Install the callback once (it must stay referenced) and set the verbosity."""
    _state["verbose"] = verbose
    if not _state["installed"]:
        # the callback first: llama_backend_init may start ggml's backend registry, and the
        # backends log as they start
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _state["installed"] = True
