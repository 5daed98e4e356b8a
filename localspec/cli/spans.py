"""`run --json`'s "spans": who wrote each part of the generated text.

Why: the stats say how many tokens each proposer drafted and got accepted; a user checking
*what* a lookup copied (or what the draft model got right) needs the text itself, attributed.
Each span is a run of consecutive text with one author, adjacent pieces of one author merged:
an accepted draft's proposer (`Accepted.source`: "draft", "ngram", "suffix") or the target's
kind of token (`Written.kind`: "correction", "bonus", "target"). The spans' texts joined are the
generated text as the events carried it (a thinking model's reasoning included, markers too).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from localspec.events import Accepted, Event, Written


class SpanLog:
    """Collects the spans of the events it is fed (or taps); `spans` is the JSON list."""

    def __init__(self) -> None:
        self.spans: list[dict] = []

    def feed(self, ev: Event) -> None:
        """Account one event: accepted and written text extend the spans, the rest is ignored."""
        if isinstance(ev, Accepted):
            by = ev.source
        elif isinstance(ev, Written):
            by = ev.kind
        else:
            return
        if not ev.text and not ev.tokens:
            return
        last = self.spans[-1] if self.spans else None
        if last is not None and last["by"] == by:
            last["text"] += ev.text
            last["tokens"] += len(ev.tokens)
        else:
            self.spans.append({"by": by, "text": ev.text, "tokens": len(ev.tokens)})

    def trimmed(self, n_tokens: int) -> list[dict]:
        """The spans with their tokens counting what `n_tokens` (Stats, usage) counts: the
        loops report the end-of-turn token with the event that sampled it, though it is not
        part of the answer; the excess comes off the last spans (server/stream.py does the
        same for provenance)."""
        out = [dict(s) for s in self.spans]
        excess = sum(s["tokens"] for s in out) - n_tokens
        for s in reversed(out):
            if excess <= 0:
                break
            cut = min(excess, s["tokens"])
            s["tokens"] -= cut
            excess -= cut
        return [s for s in out if s["text"] or s["tokens"]]

    def tap(self, events: Iterable[Event]) -> Iterator[Event]:
        """Pass `events` through unchanged, feeding each on the way."""
        for ev in events:
            self.feed(ev)
            yield ev
