"""What the user asked the output to match, and its llguidance grammar.

A `ConstraintSpec` is plain data (a kind and a text) so a frontend can build one from a flag
or a request field without loading anything; `grammar()` compiles it to llguidance's grammar
text and checks it without a vocabulary, so a broken grammar or schema is refused when the
request arrives, in one line (docs/design.md#conventions), before any model is touched.
Whether the model's tokens can satisfy it is checked later, by `Constraint`, which has them.

llguidance's own messages are multi-line (a source excerpt with a caret, sometimes a parser
state dump); `one_line` keeps their reason and drops the rest. Its positions ("at 3(8)")
point into the Lark text llguidance compiled: that is the user's text only for `lark`, so
they are kept (as "line 3 col 8") there and dropped for the other kinds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from localspec.errors import ConfigError

KINDS = {
    "gbnf": "GBNF grammar",
    "lark": "Lark grammar",
    "regex": "regex",
    "json_schema": "JSON schema",
    "json_object": "JSON object",
}

_POS = re.compile(r"\bat (\d+)\((\d+)\):\s*")
_MAX_REASON = 300


@dataclass(frozen=True)
class Trigger:
    """Where a tool call's grammar applies (decode/tool_gate.py).

    open: the call's opening marker (`<tool_call>`), whose tokens start the grammar; close:
    its closing marker ("" for formats without one). lazy (tool_choice auto): free text
    until the marker, and free again after the call; otherwise (required, a named function)
    the answer is the marker, the call, the closing marker, then the end of the turn, or
    (parallel) another call."""

    open: str
    close: str = ""
    lazy: bool = False
    parallel: bool = True


@dataclass(frozen=True)
class ConstraintSpec:
    """A constraint on the generated text.

    kind: "gbnf" (llama.cpp's grammar format; a Lark grammar with `start:` is accepted too,
    as llama.cpp's own llguidance build does), "lark" (llguidance's Lark dialect), "regex",
    "json_schema" (the schema as JSON text) or "json_object" (any JSON object; text "").
    origin: who gave it, for messages (a flag such as "--grammar", or a request field);
    optional, the kind is named either way.
    trigger: a tool call's markers (decode/tool_gate.py): the grammar applies from the
    opening marker on; None = the grammar from the first token.
    """

    kind: str
    text: str = ""
    origin: str = ""
    trigger: Trigger | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"{self._where()}unknown constraint kind {self.kind!r}: use one of {', '.join(KINDS)}")
        if self.kind == "json_object" and self.text:
            raise ConfigError(f"{self._where()}a JSON-object constraint takes no text (use json_schema for a schema)")

    def grammar(self) -> str:
        """The llguidance grammar (checked without a vocabulary; cached per kind and text).
        Raises ConfigError, one line naming the kind and llguidance's reason."""
        try:
            return _compile(self.kind, self.text)
        except _CompileError as e:
            raise ConfigError(self.message(str(e))) from None

    def message(self, reason: str) -> str:
        """`reason` as this spec's one-line error message: origin, kind, reason."""
        return f"{self._where()}{KINDS[self.kind]}: {one_line(reason, keep_position=self.kind == 'lark')}"

    def _where(self) -> str:
        return f"{self.origin}: " if self.origin else ""


class _CompileError(Exception):
    pass


@lru_cache(maxsize=64)
def _compile(kind: str, text: str) -> str:
    """(kind, text) -> llguidance grammar, validated; raises _CompileError with the reason.
    Cached: a server sees the same schema on request after request."""
    from llguidance import LLMatcher

    try:
        if kind == "gbnf":
            from llguidance.gbnf_to_lark import any_to_lark

            grammar = LLMatcher.grammar_from_lark(any_to_lark(text))
        elif kind == "lark":
            grammar = LLMatcher.grammar_from_lark(text)
        elif kind == "regex":
            grammar = LLMatcher.grammar_from_regex(text)
        elif kind == "json_schema":
            try:  # Python's JSON error points into the user's text; llguidance's into its wrapper
                json.loads(text)
            except ValueError as e:
                raise _CompileError(f"not valid JSON: {e}") from None
            grammar = LLMatcher.grammar_from_json_schema(text)
        else:
            grammar = LLMatcher.grammar_from_json_schema('{"type": "object"}')
    except _CompileError:
        raise
    except Exception as e:  # noqa: BLE001 - the GBNF converter raises bare Exception; any failure is the text's
        raise _CompileError(str(e) or type(e).__name__) from None
    err = LLMatcher.validate_grammar(grammar)
    if err:
        raise _CompileError(err)
    return grammar


def one_line(msg: str, *, keep_position: bool = True) -> str:
    """llguidance's (or the GBNF converter's) message as one line: its unindented lines
    joined (source excerpts, carets and state dumps dropped), positions as "line L col C"
    (or dropped when they point into generated text), at most ~300 characters."""
    msg = msg.split("<state>", 1)[0].replace("<non-verbose/>", "")
    kept = [ln.strip() for ln in msg.splitlines() if ln.strip() and not ln[:1].isspace()]
    text = " ".join(kept) or msg.strip().replace("\n", " ")
    text = _POS.sub(lambda m: f"line {m[1]} col {m[2]}: " if keep_position else "", text)
    text = text.replace("\r", " ").replace("\n", " ").strip()
    if len(text) > _MAX_REASON:
        text = text[: _MAX_REASON - 1].rstrip() + "…"
    return text or "rejected"
