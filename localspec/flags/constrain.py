"""Constrained output with llama.cpp's flags -> GenConfig.constraint (a ConstraintSpec).

`--grammar GBNF`, `--grammar-file PATH`, `-j/--json-schema SCHEMA`, `--json-schema-file
PATH`: the same names as llama-cli / llama-server, so a command line carries over. At most
one of them (argparse refuses two; `constraint_of` too, for a Namespace built by hand).

Everything is checked here, before any model loads: a file that cannot be read, or is not
UTF-8 (flags/text.py), or is empty, and a grammar or schema that llguidance cannot compile
(ConstraintSpec.grammar) are one ConfigError line naming the flag (and the file). Whether
the model's vocabulary can spell what the grammar asks is the engine's check, later
(localspec/constrain/, decode/constrained.py).
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

from localspec.constrain.spec import ConstraintSpec
from localspec.errors import ConfigError
from localspec.flags.text import arg_text, decode_utf8

DESCRIPTION = """\
The answer must match a grammar or a JSON schema (llama.cpp's flags; at most one of them).
At every position only the tokens the grammar allows can be sampled, by the target as by
the drafters: speculation stays lossless under a constraint (the answer has the law of
plain constrained decoding, and at --temp 0 the same text), and the tokens the grammar
forces (a JSON key, its quotes, a brace) are drafted for free, with no model call, and never
rejected (`run --json`: "forced"). A thinking model's thinking block stays free; the
grammar holds the answer after it. Checked before any model loads. serve: the
constraint of every request that sends no response_format / grammar / json_schema of its own."""


class Source(NamedTuple):
    dest: str  # the Namespace attribute
    flag: str  # as the user typed it, for messages
    kind: str  # ConstraintSpec.kind
    is_file: bool


SOURCES = (
    Source("grammar", "--grammar", "gbnf", False),
    Source("grammar_file", "--grammar-file", "gbnf", True),
    Source("json_schema", "-j/--json-schema", "json_schema", False),
    Source("json_schema_file", "--json-schema-file", "json_schema", True),
)


def add_constraint_args(p: argparse.ArgumentParser) -> None:
    """The four flags (one group; two of them at once: argparse's one-line error, exit 2)."""
    g = p.add_argument_group("constrained output (llama.cpp's flags)", DESCRIPTION)
    x = g.add_mutually_exclusive_group()
    x.add_argument("--grammar", default=None, metavar="GBNF",
                   help="a GBNF grammar (llama.cpp's format; the `root` rule is the whole answer), e.g. "
                   "'root ::= (\"yes\" | \"no\")': the answer is yes or no")
    x.add_argument("--grammar-file", default=None, metavar="PATH",
                   help="read the GBNF grammar from a UTF-8 file (llama.cpp's grammars/*.gbnf work as they are)")
    x.add_argument("-j", "--json-schema", default=None, metavar="SCHEMA",
                   help="a JSON schema (JSON text): the answer is JSON that it validates, e.g. "
                   "'{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}'"
                   "; '{}' = any JSON value. $refs must be local (#/...): nothing is fetched")
    x.add_argument("--json-schema-file", default=None, metavar="PATH",
                   help="read the JSON schema from a UTF-8 file")


def constraint_of(a: argparse.Namespace) -> ConstraintSpec | None:
    """The constraint the flags ask for (None: none), compiled once to check it: a bad
    grammar or schema, an unreadable, non-UTF-8 or empty file is a ConfigError (one line)."""
    given = [s for s in SOURCES if getattr(a, s.dest, None) is not None]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(s.flag for s in given)}: give at most one grammar or JSON schema")
    if not given:
        return None
    s = given[0]
    value = getattr(a, s.dest)
    if s.is_file:
        origin = f"{s.flag} {value}"
        text = _read(value, origin)
    else:
        origin = s.flag
        text = arg_text(value, s.flag)  # argv bytes that are not UTF-8
        if not text.strip():
            raise ConfigError(f"{s.flag} is empty: give a {'grammar' if s.kind == 'gbnf' else 'JSON schema'}")
    spec = ConstraintSpec(s.kind, text, origin=origin)
    spec.grammar()  # compiles (cached): ConfigError naming the origin and llguidance's reason
    return spec


def _read(path: str, what: str) -> str:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        raise ConfigError(f"{what}: cannot read the file: {e.strerror or e}") from None
    text = decode_utf8(raw, what)
    if not text.strip():
        raise ConfigError(f"{what}: the file is empty{' (only whitespace)' if text else ''}")
    return text
