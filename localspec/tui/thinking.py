"""The TUI's thinking block: a thinking model's reasoning shown dimmed, folded once it answers.

A pure layer over the transcript's spans (no Textual here): the transcript keeps colouring
every span by who wrote it (draft, correction, bonus, target, rejected); where the reasoning
lies is not decided here but by localspec.thinking.split's ReasoningSplitter, the one split
rule `run` and `serve` use too, fed the same events: its pieces say, by offset into the
visible text (localspec.thinking.pieces.Layout), which characters are reasoning, which are
answer and which (markers, stripped whitespace) are hidden. This dims the reasoning while
keeping its speculation colours and, once the answer has started and folding is on,
replaces the block by one line:
"▸ thought for 412 tokens, 9.1 s, block eff 4.20". F4 toggles folding, F5 cycles the
thinking switch (auto / on / off) for the next turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text

from localspec.events import Done, Event
from localspec.session import Session
from localspec.thinking.pieces import Layout
from localspec.thinking.split import (
    ReasoningSplitter,
    markers_of,
    opens_block,
    segment_summary,
    thinking_kwargs,
)
from localspec.tui.transcript import STYLES, VISIBLE_KINDS, Span, Turn, span_style

MODES = ("auto", "on", "off")


def render_block(spans: list[Span], layout: Layout, *, closed: bool, folded: bool, summary: str,
                 show_rejected: bool = True) -> Text:
    """The turn's Text with each visible character where the splitter put it (`layout`):
    reasoning dimmed, the answer as written, markers and the whitespace the split strips
    hidden. Folding applies once the block is `closed`: one summary line, then the answer.
    Text that is not the model's (rejected drafts, PARSE markers, notes) goes with the
    region its position falls in."""
    a_from = layout.answer_from
    if a_from is None:  # closed with no answer yet: what follows the visible text is the answer's
        a_from = sum(len(s.text) for s in spans if s.kind in VISIBLE_KINDS)
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
        lo, pos = pos, pos + len(span.text)
        for segment, a, b in layout.cut(lo, pos):
            if segment == "reasoning":
                if not fold:
                    text.append(span.text[a - lo : b - lo], style=f"{style} dim")
                continue
            if not answering and not fold:
                text.append("\n")  # where the close marker was: a line between thinking and answer
            answering = True
            text.append(span.text[a - lo : b - lo], style=style)
    return text


@dataclass
class _Block:
    """One turn's splitter (its stats and state) and where its pieces lie in the turn's text."""

    splitter: ReasoningSplitter
    layout: Layout = field(default_factory=Layout)


@dataclass
class ThinkingBlocks:
    """Per-turn reasoning state of the app (UI thread only): each turn's splitter and the
    layout of its pieces, the fold switch and the next turn's mode."""

    folded: bool = True
    mode: str = "auto"
    _turns: dict[int, _Block] = field(default_factory=dict)

    def chat_kwargs(self, session: Session) -> dict:
        """Extra Session.chat arguments for the next turn ({} in auto: nothing to pass)."""
        if self.mode == "auto" or markers_of(session) is None:
            return {}
        return {"template_kwargs": thinking_kwargs(session, self.mode)}

    def cycle_mode(self) -> str:
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]
        return self.mode

    def feed(self, index: int, ev: Event, session: Session | None) -> None:
        """Run the turn's event through its splitter (the same events the transcript gets, so
        Piece.start counts the same visible characters as the transcript's spans)."""
        markers = markers_of(session)
        if markers is None or index < 0:
            return
        if index not in self._turns:
            kwargs = self.chat_kwargs(session).get("template_kwargs")  # type: ignore[arg-type]
            inside = opens_block(session, kwargs)  # type: ignore[arg-type]
            self._turns[index] = _Block(ReasoningSplitter(markers, inside))
        block = self._turns[index]
        pieces = block.splitter.finish() if isinstance(ev, Done) else []  # the end releases held text
        block.layout.add(pieces + block.splitter.feed(ev))

    def render(self, index: int, turn: Turn, session: Session | None, fallback: Text, *,
               show_rejected: bool = True) -> Text:
        """The turn's answer with its thinking block, or `fallback` when it has none."""
        block = self._turns.get(index)
        if markers_of(session) is None or block is None or not block.splitter.opened:
            return fallback  # no reasoning block: the turn as written
        sp = block.splitter
        summary = segment_summary(sp.stats["reasoning"], speculative=True)
        return render_block(turn.spans, block.layout, closed=sp.answering, folded=self.folded,
                            summary=summary, show_rejected=show_rejected)

    def reset(self) -> None:
        self._turns.clear()
