"""What the user typed as text, checked before any model loads (the numbers: settings.check).

The text rule (also in `localspec run --help`): prompts are UTF-8. A `-p` argument or a
`-f` file with bytes that are not valid UTF-8 is refused, naming the offset of the first
bad byte; it is never silently replaced, because a replaced byte changes the prompt the
model sees. A UTF-8 byte-order mark at the start of a file is dropped. An empty (or
whitespace-only) prompt is refused too.
"""

from __future__ import annotations

import argparse
import os
import sys

from localspec.errors import ConfigError

BOM = "\ufeff"


def _not_utf8(raw: bytes, what: str, e: UnicodeDecodeError) -> ConfigError:
    line = raw.count(b"\n", 0, e.start) + 1
    return ConfigError(
        f"{what} is not UTF-8: byte 0x{raw[e.start]:02x} at byte offset {e.start} (line {line}); "
        "prompts must be UTF-8 (convert it, e.g. `iconv -f latin1 -t utf-8`)"
    )


def decode_utf8(raw: bytes, what: str) -> str:
    """bytes -> str under the prompt rule (strict UTF-8, a leading BOM dropped)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(raw, what, e) from None
    return text[1:] if text.startswith(BOM) else text


def arg_text(value: str, what: str) -> str:
    """A text argument under the prompt rule.

    Python decodes argv with surrogateescape, so bytes that are not UTF-8 arrive as lone
    surrogates (which fail later, deep inside tokenization, as a UnicodeEncodeError); the
    original bytes are recovered with os.fsencode to name the offset.
    """
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        raw = os.fsencode(value)
    except UnicodeEncodeError:  # surrogates that did not come from argv bytes
        raise ConfigError(f"{what} contains characters that are not valid Unicode text") from None
    return decode_utf8(raw, what)


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
