"""The TUI's thinking block: a thinking model's reasoning shown dimmed, folded once it answers.

A pure layer over the transcript's spans (no Textual here): the transcript keeps colouring
every span by who wrote it (draft, correction, bonus, target, rejected); this finds where
the reasoning block lies in the visible text (localspec.thinking.split's rules: the block only
at the start, or from the first character when the template opened it), hides the
markers, dims the reasoning spans while keeping their speculation colours, and, once the
answer has started and folding is on, replaces the block by one line:
"▸ thought for 412 tokens, 9.1 s, block eff 4.20". F4 toggles folding, F5 cycles the
thinking switch (auto / on / off) for the next turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text

from localspec.events import Event
from localspec.session import Session, ThinkMarkers
from localspec.thinking.split import (
    ReasoningSplitter,
    markers_of,
    opens_block,
    segment_summary,
    thinking_kwargs,
)
from localspec.tui.transcript import STYLES, VISIBLE_KINDS, Span, Turn, span_style

MODES = ("auto", "on", "off")


def block_bounds(visible: str, markers: ThinkMarkers, inside: bool) -> tuple[int, int, int] | None:
    """(reasoning_from, reasoning_to, answer_from) offsets in the visible text; the rest (the
    markers and the whitespace around them) is hidden. answer_from is -1 while the block
    is still open. None: this text has no block. localspec.thinking.split's splitter applies the
    same rules to a stream; tests/test_thinking.py holds the two to the same cases."""
    if inside:
        start = 0
    else:
        s = visible.lstrip()
        if not s.startswith(markers.open):
            return None
        start = len(visible) - len(s) + len(markers.open)
    start += len(visible[start:]) - len(visible[start:].lstrip())
    close = visible.find(markers.close, start)
    if close < 0:
        return start, len(visible.rstrip()), -1
    end = start + len(visible[start:close].rstrip())
    after = close + len(markers.close)
    after += len(visible[after:]) - len(visible[after:].lstrip())
    return start, end, after


def render_block(spans: list[Span], markers: ThinkMarkers, *, inside: bool, folded: bool, summary: str,
                 show_rejected: bool = True) -> Text | None:
    """The turn's Text with its reasoning block dimmed (or folded); None when it has none.

    Folding applies once the block is closed: one summary line, then the answer. Rejected
    draft text goes with the region its position falls in."""
    visible = "".join(s.text for s in spans if s.kind in VISIBLE_KINDS)
    bounds = block_bounds(visible, markers, inside)
    if bounds is None:
        return None
    r_from, r_to, a_from = bounds
    closed = a_from >= 0
    fold = folded and closed
    text = Text()
    if fold:
        text.append(f"▸ {summary}\n", style=STYLES["note"])
    answering = False
    pos = 0
    for span in spans:
        if not show_rejected and (span.kind == "rejected" or span.hidden_with_rejected):
            continue
        style = span_style(span)
        if span.kind not in VISIBLE_KINDS:
            if closed and pos >= a_from:
                text.append(span.text, style=style)
            elif not fold:
                text.append(span.text, style=f"{style} dim")
            continue
        lo, hi = pos, pos + len(span.text)
        pos = hi
        if not fold:
            a, b = max(lo, r_from), min(hi, r_to)
            if b > a:
                text.append(span.text[a - lo : b - lo], style=f"{style} dim")
        if closed and hi > a_from:
            if not answering and not fold:
                text.append("\n")  # where the close marker was: a line between thinking and answer
            answering = True
            text.append(span.text[max(lo, a_from) - lo :], style=style)
    return text


@dataclass
class ThinkingBlocks:
    """Per-turn reasoning state of the app (UI thread only): splitters for the stats,
    whether each turn began inside the block, the fold switch and the next turn's mode."""

    folded: bool = True
    mode: str = "auto"
    _turns: dict[int, tuple[ReasoningSplitter, bool]] = field(default_factory=dict)

    def chat_kwargs(self, session: Session) -> dict:
        """Extra Session.chat arguments for the next turn ({} in auto: nothing to pass)."""
        if self.mode == "auto" or markers_of(session) is None:
            return {}
        return {"template_kwargs": thinking_kwargs(session, self.mode)}

    def cycle_mode(self) -> str:
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]
        return self.mode

    def feed(self, index: int, ev: Event, session: Session | None) -> None:
        markers = markers_of(session)
        if markers is None or index < 0:
            return
        if index not in self._turns:
            kwargs = self.chat_kwargs(session).get("template_kwargs")  # type: ignore[arg-type]
            inside = opens_block(session, kwargs)  # type: ignore[arg-type]
            self._turns[index] = (ReasoningSplitter(markers, inside), inside)
        self._turns[index][0].feed(ev)

    def render(self, index: int, turn: Turn, session: Session | None, fallback: Text, *,
               show_rejected: bool = True) -> Text:
        """The turn's answer with its thinking block, or `fallback` when it has none."""
        markers = markers_of(session)
        got = self._turns.get(index)
        if markers is None or got is None:
            return fallback
        splitter, inside = got
        summary = segment_summary(splitter.stats["reasoning"], speculative=True)
        out = render_block(turn.spans, markers, inside=inside, folded=self.folded, summary=summary,
                           show_rejected=show_rejected)
        return fallback if out is None else out

    def reset(self) -> None:
        self._turns.clear()
