"""`localspec run`'s fill-in-the-middle flags: the text around a cursor, from files.

`--fim-prefix-file` (the text before the cursor) and `--fim-suffix-file` (after it; empty
when omitted) make the prompt in the target's own FIM format (Session.fim_prompt, the same
prompt the server's /infill makes), so a completion can be tried and timed from a shell;
`--fim-extra-file` adds neighbouring files as repository context (each named by its file
name, oldest first, as an editor sends `input_extra`). The files follow the text rule
(UTF-8, checked before any model loads); a model without FIM tokens is one line, exit 2.
`--n-indent` / `--max-lines` are the line rules that end a completion at the end of the hole
(decode/lines.py), for any `run`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from localspec.errors import ConfigError
from localspec.flags.text import decode_utf8
from localspec.session import FimInput


def add_fim_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fill in the middle (code completion; a FIM model such as qwen2.5-coder)")
    g.add_argument("--fim-prefix-file", metavar="PATH", default=None,
                   help="the text before the cursor: fill in the middle instead of -p/-f (UTF-8)")
    g.add_argument("--fim-suffix-file", metavar="PATH", default=None,
                   help="the text after the cursor (default: none)")
    g.add_argument("--fim-extra-file", metavar="PATH", action="append", default=[],
                   help="a neighbouring file as repository context (repeatable; sent as llama-server's input_extra)")
    g.add_argument("--n-indent", type=int, default=0, metavar="N",
                   help="end at a new line (after the first) indented by fewer than N spaces/tabs (llama-server's "
                        "n_indent; 0 = off)")
    g.add_argument("--max-lines", type=int, default=0, metavar="N", help="end after N lines (0 = off)")


def fim_input(a: argparse.Namespace) -> FimInput | None:
    """The FIM request the flags describe (None: an ordinary prompt); files read and checked."""
    if a.fim_prefix_file is None:
        if a.fim_suffix_file is not None or a.fim_extra_file:
            raise ConfigError("--fim-suffix-file / --fim-extra-file need --fim-prefix-file (the text before the cursor)")
        return None
    if a.prompt is not None or a.file is not None:
        raise ConfigError("--fim-prefix-file takes the place of -p/-f: give one or the other")
    if a.raw:
        raise ConfigError("--raw has no meaning with --fim-prefix-file (a FIM prompt is never chat-templated)")
    suffix = _read(a.fim_suffix_file) if a.fim_suffix_file is not None else ""
    extra = tuple({"filename": Path(f).name, "text": _read(f)} for f in a.fim_extra_file)
    return FimInput(_read(a.fim_prefix_file), suffix, extra)


def read_text_file(path: str) -> str:
    """A UTF-8 file named on the command line (the text rule); a missing one is one line, exit 2."""
    return _read(path)


def _read(path: str) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    return decode_utf8(raw, f"file {path}")
