"""A pure model of the conversation as styled spans (no Textual here).

Why a separate model: the interesting logic (where a rejected draft goes, where PARSE cut
markers fall inside the accepted/rejected text, what the visible answer is) must be testable
without running an app, and the app only has to turn spans into a `rich.text.Text`.

Placement rules (from the events contract):
- The visible answer is the concatenation of `Accepted.text` and `Written.text`, in order.
- `Rejected` text belongs right after the `Accepted` span of the same iteration, even when
  the engine emits it after the correction token.
- PARSE: `Judged.cut_chars` are offsets into the drafted answer (`Drafted.texts[0]`);
  `Cut.char_star` splits it into the accepted prefix and the rejected tail, so cut markers
  with offset <= char_star land inside the accepted text and the others inside the rejected
  text (offset - char_star).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from rich.text import Text

from localspec.events import Accepted, Cut, Done, Drafted, Event, Judged, Rejected, Written

SpanKind = Literal[
    "draft", "ngram", "suffix", "grammar", "correction", "bonus", "target", "rejected", "cut", "tstar", "note",
    "error",
]
# Accepted draft text is styled by the proposer that wrote it (Accepted.source): the draft
# model's green, a lookup's (no model call: text copied from the prompt / the session) its own.
LOOKUP_KINDS: tuple[SpanKind, ...] = ("ngram", "suffix")
# drafters with a style of their own: the lookups and the grammar's forced tokens
OWN_KINDS: tuple[SpanKind, ...] = (*LOOKUP_KINDS, "grammar")

# One place for the colour legend (docs/tui.md mirrors it).
STYLES: dict[str, str] = {
    "user": "bold",
    "draft": "#98c379",
    "ngram": "underline #61afef",
    "suffix": "underline #d19a66",
    "grammar": "underline #abb2bf",
    "correction": "bold #e5c07b",
    "bonus": "#56b6c2",
    "target": "#c678dd",
    "rejected": "dim strike #e06c75",
    "cut_pass": "bold #98c379 on #3a3f4b",
    "cut_fail": "bold #e06c75 on #3a3f4b",
    "tstar": "bold #1e1e1e on #e5c07b",
    "note": "italic dim",
    "error": "bold #e06c75",
}
# Hex colours, not ANSI names: the legend must look the same under every Textual theme
# (ANSI "magenta" renders close to red in some, and red is reserved for rejected text).
# Lookup text is underlined as well as coloured: copied text stays told apart from the
# draft model's and the target's even where blue / orange read close to cyan / yellow.

VISIBLE_KINDS = frozenset({"draft", *OWN_KINDS, "correction", "bonus", "target"})


def accepted_kind(source: str) -> SpanKind:
    """The span kind of accepted draft text written by `source` (unknown: the draft model's,
    so a new proposer shows as accepted draft text until it has a colour of its own)."""
    return next((k for k in OWN_KINDS if k == source), "draft")


@dataclass
class Span:
    """A run of text with one provenance. Markers (cut/tstar) carry the judge score.

    `hidden_with_rejected` marks spans that only make sense next to rejected text (cut
    markers that fall inside the rejected tail), so toggling rejected text hides them too.
    """

    text: str
    kind: SpanKind
    score: float | None = None
    passed: bool = True
    hidden_with_rejected: bool = False


@dataclass
class Turn:
    """One user message and the assistant answer being built from events."""

    user: str
    spans: list[Span] = field(default_factory=list)
    done: Done | None = None

    def answer(self) -> str:
        """The visible answer: accepted + written text only (what Done.text should equal)."""
        return "".join(s.text for s in self.spans if s.kind in VISIBLE_KINDS)


@dataclass
class _ParseState:
    """PARSE bookkeeping between Judged/Cut and the Accepted/Rejected they annotate."""

    cut_chars: tuple[int, ...] = ()
    scores: tuple[float, ...] = ()
    threshold: float = 0.5
    char_star: int | None = None


class Transcript:
    """All turns of the conversation, updated one event at a time (UI thread only)."""

    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self._anchor = 0  # index in current spans right after this iteration's accepted text
        self._accepted_k: int | None = None
        self._parse: _ParseState | None = None

    # --- building -------------------------------------------------------------------------

    @property
    def current(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def begin_turn(self, user_text: str) -> Turn:
        """Start a new turn; later events extend its answer."""
        turn = Turn(user=user_text)
        self.turns.append(turn)
        self._anchor = 0
        self._accepted_k = None
        self._parse = None
        return turn

    def add_note(self, text: str, kind: SpanKind = "note") -> None:
        """Append an informational or error line to the current turn (or a new empty one)."""
        turn = self.current or self.begin_turn("")
        turn.spans.append(Span(text, kind))

    def apply_all(self, events: Iterable[Event]) -> None:
        for ev in events:
            self.apply(ev)

    def apply(self, ev: Event) -> None:
        """Fold one event into the current turn. Unknown/stat events are ignored here."""
        turn = self.current or self.begin_turn("")
        spans = turn.spans
        if isinstance(ev, Drafted):
            self._anchor = len(spans)
            self._accepted_k = None
            self._parse = None
        elif isinstance(ev, Judged):
            self._parse = _ParseState(ev.cut_chars, ev.scores, ev.threshold)
        elif isinstance(ev, Cut):
            if self._parse is None:
                self._parse = _ParseState()
            self._parse.char_star = ev.char_star
        elif isinstance(ev, Accepted):
            self._accepted_k = ev.k
            new = self._with_markers(ev.text, accepted_kind(ev.source), offset=0, inside_rejected=False)
            spans.extend(new)
            self._anchor = len(spans)
        elif isinstance(ev, Rejected):
            if self._accepted_k is not None and ev.k != self._accepted_k:
                return  # tails of drafts that lost the race would only be noise
            star = self._parse.char_star if self._parse and self._parse.char_star else 0
            new = self._with_markers(ev.text, "rejected", offset=star, inside_rejected=True)
            if self._accepted_k is None and self._parse is not None:
                # t* = 0 with no Accepted event: the t* marker still goes before the tail.
                new = self._with_markers("", "draft", offset=0, inside_rejected=False) + new
            spans[self._anchor : self._anchor] = new
            self._anchor += len(new)
        elif isinstance(ev, Written):
            if ev.text:
                spans.append(Span(ev.text, ev.kind))
        elif isinstance(ev, Done):
            turn.done = ev

    def _with_markers(
        self, text: str, kind: SpanKind, *, offset: int, inside_rejected: bool
    ) -> list[Span]:
        """Split `text` at the PARSE cut points that fall inside it and insert markers.

        `offset` is where `text` starts in the drafted answer (0 for the accepted prefix,
        char_star for the rejected tail). Without PARSE state the text is one span.
        """
        p = self._parse
        if p is None or p.char_star is None or not p.cut_chars:
            return [Span(text, kind)] if text else []
        star = p.char_star
        lo, hi = offset, offset + len(text)
        marks: list[tuple[int, Span]] = []
        for c, score in zip(p.cut_chars, p.scores, strict=False):
            in_range = (lo <= c <= star) if not inside_rejected else (star < c)
            if not in_range:
                continue
            pos = min(max(c, lo), hi) - lo
            if c == star:
                marks.append((pos, Span(f"‹t* {score:.2f}›", "tstar", score)))
            else:
                passed = score >= p.threshold
                marks.append((pos, Span(f"‹{score:.2f}›", "cut", score, passed, inside_rejected)))
        if not inside_rejected and star not in p.cut_chars:
            marks.append((min(star, hi) - lo, Span("‹t*›", "tstar")))
        marks.sort(key=lambda m: m[0])
        out: list[Span] = []
        prev = 0
        for pos, mark in marks:
            if pos > prev:
                out.append(Span(text[prev:pos], kind))
            out.append(mark)
            prev = max(prev, pos)
        if prev < len(text):
            out.append(Span(text[prev:], kind))
        return out

    # --- rendering ------------------------------------------------------------------------

    def render_turn(self, turn: Turn, *, show_rejected: bool = True) -> Text:
        """The assistant answer as rich Text, styled by provenance."""
        return render_spans(turn.spans, show_rejected=show_rejected)


def span_style(span: Span) -> str:
    """The rich style of a span (markers depend on whether the judge passed the cut)."""
    if span.kind == "cut":
        return STYLES["cut_pass"] if span.passed else STYLES["cut_fail"]
    return STYLES[span.kind]


def render_spans(spans: Iterable[Span], *, show_rejected: bool = True) -> Text:
    """Turn spans into rich Text; rejected text (and markers inside it) can be hidden."""
    text = Text()
    for span in spans:
        if not show_rejected and (span.kind == "rejected" or span.hidden_with_rejected):
            continue
        text.append(span.text, style=span_style(span))
    return text
