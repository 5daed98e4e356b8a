"""The prompt of `localspec run`, checked before any model loads (the numbers: settings.check).

The prompt follows the text rule (localspec.flags.text, also in `localspec run --help`): it
must be UTF-8, never silently replaced; a leading byte-order mark in a file is dropped. An
empty (or whitespace-only) prompt is refused too.
"""

from __future__ import annotations

import argparse
import sys

from localspec.errors import ConfigError
from localspec.flags.text import arg_text, decode_utf8


def _stdin_bytes() -> bytes:
    """All of stdin. Python sets sys.stdin to None when file descriptor 0 was closed at
    start (`localspec run -f - <&-`): that is bad input, said in one line, not an
    AttributeError."""
    stdin = sys.stdin
    if stdin is None or getattr(stdin, "buffer", None) is None:
        raise ConfigError("cannot read the prompt from stdin (-f -): stdin is closed; "
                          "pipe the prompt in, or pass -f PATH or -p TEXT")
    try:
        return stdin.buffer.read()
    except ValueError:  # closed from Python's side
        raise ConfigError("cannot read the prompt from stdin (-f -): stdin is closed") from None


def read_prompt(a: argparse.Namespace) -> str:
    """The prompt of `localspec run` (-p TEXT, -f PATH, or -f - for stdin) under the rule."""
    if a.file is not None:
        what = "the prompt on stdin" if a.file == "-" else f"prompt file {a.file}"
        try:
            if a.file == "-":
                raw = _stdin_bytes()
            else:
                with open(a.file, "rb") as fh:
                    raw = fh.read()
        except OSError as e:
            raise ConfigError(f"cannot read prompt file {a.file}: {e.strerror}") from None
        text = decode_utf8(raw, what)
        if not text.strip():
            raise ConfigError(f"{what} is empty{' (only whitespace)' if text else ''}: nothing to answer")
        return text
    if a.prompt is None:
        raise ConfigError("no prompt: pass -p/--prompt TEXT or -f/--file PATH")
    text = arg_text(a.prompt, "-p/--prompt")
    if not text.strip():
        raise ConfigError(f"empty prompt: -p/--prompt is {'only whitespace' if text else 'empty'}")
    return text
