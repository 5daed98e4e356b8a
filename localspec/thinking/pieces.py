"""The typed stream a thinking model's text becomes: reasoning / answer pieces, and where they lie.

One rule decides what is reasoning and what is answer: `ReasoningSplitter` (split.py). Every
frontend consumes its pieces instead of deciding again: `run` prints them (cli/reasoning.py),
`serve` sends them as `reasoning_content` / `content` (server/worker.py), and the TUI, which
keeps the whole transcript with its speculation colours, places them over it by `start`
(a `Layout`), so it never looks for the markers in the text itself (tui/thinking.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

Segment = Literal["reasoning", "answer"]
SEGMENTS: tuple[Segment, Segment] = ("reasoning", "answer")


class Piece(NamedTuple):
    """Visible text routed to a segment; `tokens` are the event's tokens that went there
    (text may lag its tokens: a marker or whitespace is held until it is decided).

    `start` is where `text` begins in the generation's visible text (its `Accepted.text` and
    `Written.text`, concatenated in order): a piece is always one unbroken run of it, so a
    frontend that shows the raw text can tell which characters the split kept, and where."""

    segment: Segment
    text: str
    tokens: int
    kind: str  # the event's provenance: draft, correction, bonus, target, forced
    start: int


Region = tuple[Segment, int, int]
"""(segment, start, end): a run of the visible text that went to one segment."""


@dataclass
class Layout:
    """Which segment each character of a generation's visible text went to, built from its pieces.

    Characters no region covers are hidden: the markers, the whitespace the split strips, and
    text the splitter still holds undecided. Adjacent pieces of one segment merge, so a whole
    generation is one reasoning region and one answer region (cut() stays cheap per render).
    """

    regions: list[Region] = field(default_factory=list)

    def add(self, pieces: Iterable[Piece]) -> None:
        for p in pieces:
            if not p.text:
                continue
            end = p.start + len(p.text)
            last = self.regions[-1] if self.regions else None
            if last is not None and last[0] == p.segment and last[2] == p.start:
                self.regions[-1] = (p.segment, last[1], end)
            else:
                self.regions.append((p.segment, p.start, end))

    @property
    def answer_from(self) -> int | None:
        """Where the answer's first character is (None: no answer text yet)."""
        return next((a for s, a, _ in self.regions if s == "answer"), None)

    def cut(self, lo: int, hi: int) -> list[Region]:
        """The parts of the visible run [lo, hi) that went to a segment, in order."""
        return [(s, max(a, lo), min(b, hi)) for s, a, b in self.regions if a < hi and b > lo]
