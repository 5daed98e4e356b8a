"""The text rule for what the user types (also in `localspec run --help`): UTF-8.

A text argument (`-p`, `--stop`, `--grammar`, ...) or a file (`-f`, `--grammar-file`, ...)
with bytes that are not valid UTF-8 is refused, naming the offset of the first bad byte; it
is never silently replaced, because a replaced byte changes what the model sees. A UTF-8
byte-order mark at the start of a file is dropped.
"""

from __future__ import annotations

import os

from localspec.errors import ConfigError

BOM = "\ufeff"


def _not_utf8(raw: bytes, what: str, e: UnicodeDecodeError) -> ConfigError:
    line = raw.count(b"\n", 0, e.start) + 1
    return ConfigError(
        f"{what} is not UTF-8: byte 0x{raw[e.start]:02x} at byte offset {e.start} (line {line}); "
        "text must be UTF-8 (convert it, e.g. `iconv -f latin1 -t utf-8`)"
    )


def decode_utf8(raw: bytes, what: str) -> str:
    """bytes -> str under the text rule (strict UTF-8, a leading BOM dropped)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(raw, what, e) from None
    return text[1:] if text.startswith(BOM) else text


def arg_text(value: str, what: str) -> str:
    """A text argument under the text rule.

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
