"""--reasoning-budget N: after N thinking tokens the target is made to close the block.

Done above the decoding loops, with the public Session API only, so every method (ar, sd,
gbv, mdbv, spectr, auto, parse) gets it unchanged:

1. The generation runs with `n_predict` capped where the budget ends (N tokens after the
   open marker; the marker itself counted apart, as llama.cpp's reasoning-budget sampler
   counts them).
2. If it stops there still inside the block, the close marker (and the whitespace the
   template writes after it: "\\n</think>\\n\\n" for Qwen3, read from the template) is
   appended as a FORCED text (`ForcedWritten` event: it is NOT the target's choice, the
   one lossy step, as in llama.cpp where the sampler forces the same tokens), and a second
   `generate()` continues from prompt + generated tokens + forced tokens. The session
   reuses the KV cache of the longest common token prefix, so the continuation evaluates
   only the forced tokens (and the last generated one).
3. If the cap was reached for another reason (the block closed on its own and the answer
   ran into the cap, or the open marker came late) the continuation is unforced: continuing
   a prefix is exact, so only the forced close changes what the target would have written.

The caller sees ONE event stream ending with one Done whose text is everything written
(forced text included) and whose stats add up all phases (`phases` keeps them apart: the
continuation's `prompt_evaluated` shows the reuse). Known limits, both only at a phase
boundary: a multi-byte character cut by the cap shows as U+FFFD, and a stop string that
spans the boundary is not seen.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from localspec.config import GenConfig
from localspec.events import Accepted, Done, Event, Stats, StatsUpdate, Written
from localspec.session import Prompt, Session, ThinkMarkers
from localspec.thinking.pieces import Piece
from localspec.thinking.split import (
    ReasoningSplitter,
    ends_closed,
    markers_of,
    starts_inside,
)


@dataclass(frozen=True)
class ForcedWritten(Written):
    """Text the budget wrote in the target's place (the close marker): not sampled."""

    forced: bool = True


def close_sequence(session: Session, markers: ThinkMarkers, template_kwargs: Mapping[str, object] | None) -> str:
    """What the chat template writes between the reasoning and the answer.

    Rendered from the template itself (a past turn with a reasoning block); the fallback
    "\\n</think>\\n\\n" is what the Qwen3 and DeepSeek-R1 templates write.
    """
    fallback = f"\n{markers.close}\n\n"
    r, a = "REASONINGPROBE", "ANSWERPROBE"
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": f"{markers.open}\n{r}\n{markers.close}\n\n{a}"}]
    try:
        text = session.render(msgs, template_kwargs=template_kwargs)
    except Exception:  # noqa: BLE001 - a template that refuses this shape: use the fallback
        return fallback
    i = text.find(r)
    j = text.find(a, i + len(r)) if i >= 0 else -1
    sep = text[i + len(r) : j] if j > i >= 0 else ""
    return sep if markers.close in sep and len(sep) <= len(markers.close) + 8 else fallback


def merge_stats(phases: list[Stats]) -> Stats:
    """One Stats for several generate() calls of one answer (Stats.merged, field by field)."""
    out = phases[0].copy()
    for st in phases[1:]:
        out = out.merged(st)
    return out


class ThinkingRun:
    """The events of one answer with a thinking budget; iterate it like `generate()`'s.

    `take()` returns the (segment, text) pieces of the events yielded so far (the
    splitter runs here anyway, to know when the budget is spent); `splitter` holds the
    reasoning / answer texts and per-segment stats; `phases` the Stats of each
    generate() call; `forced` the forced close text ('' if none).
    """

    def __init__(self, session: Session, prompt: Prompt, cfg: GenConfig, *, prefill: str = "",
                 template_kwargs: Mapping[str, object] | None = None, budget: int | None = None) -> None:
        self.session = session
        self.prompt = prompt
        self.cfg = cfg
        self.prefill = prefill
        self.template_kwargs = template_kwargs
        self.markers = markers_of(session)
        self.budget = budget if (budget is not None and budget >= 0 and self.markers is not None) else None
        self._is_messages = not isinstance(prompt, str) and bool(prompt) and not isinstance(list(prompt)[0], int)
        text = None
        if self._is_messages:
            text = session.render(list(prompt), template_kwargs=template_kwargs) + prefill  # type: ignore[arg-type]
        elif isinstance(prompt, str):
            text = prompt
        self.splitter = ReasoningSplitter(self.markers, starts_inside(text or "", self.markers),
                                          ends_closed(text or "", self.markers))
        self.phases: list[Stats] = []
        self.forced = ""
        self.text = ""
        self._gen_ids: list[int] = []
        self._streamed = ""  # text of the current phase's events
        self._pieces: list[Piece] = []
        self._remaining = cfg.n_predict
        self._pending_forced: ForcedWritten | None = None
        cap = self._cap()
        if cap == 0:  # budget 0 inside an open block: close it before generating anything
            self._pending_forced = self._force()
            self._gen_ids = list(self._pending_forced.tokens)
            self.text = self._pending_forced.text
            cap = self._remaining
        self._limited = cap < self._remaining
        self._events = self._run(self._call(cap))  # bad input raises here, before any event

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[Event]:
        return self._events

    def __next__(self) -> Event:
        return next(self._events)

    def close(self) -> None:
        self._events.close()

    def take(self) -> list[Piece]:
        """Pieces of the events yielded since the last call."""
        out, self._pieces = self._pieces, []
        return out

    # ------------------------------------------------------------------ phases
    def _cap(self) -> int:
        """n_predict for the next phase: where the budget ends, or what is left."""
        sp, left = self.splitter, self._remaining
        if self.budget is None or self.forced or sp.answering:
            return left
        if sp.thinking:
            return min(left, max(0, self.budget - sp.inner_tokens))
        return min(left, self.budget + max(1, len(self.markers.open_ids)))  # type: ignore[union-attr]

    def _call(self, cap: int) -> Iterator[Event]:
        """One generate() continuing everything written so far."""
        k = len(self.phases)
        cfg = replace(self.cfg, n_predict=cap, seed=None if self.cfg.seed is None else self.cfg.seed + k)
        if not self._gen_ids:
            return self.session.generate(self.prompt, cfg, prefill=self.prefill, template_kwargs=self.template_kwargs)
        if self._is_messages:  # the session re-uses the exact tokens of prompt + answer so far
            return self.session.generate(self.prompt, cfg, prefill=self.prefill + self.text,
                                         template_kwargs=self.template_kwargs)
        base = self.session.tokenize(self.prompt) if isinstance(self.prompt, str) else [int(t) for t in self.prompt]
        return self.session.generate(base + self._gen_ids, cfg)

    def _force(self) -> ForcedWritten:
        """The forced close: marker + the template's whitespace, its tokens without BOS."""
        assert self.markers is not None
        seq = close_sequence(self.session, self.markers, self.template_kwargs)
        lead = seq[: seq.index(self.markers.close)]
        if self.text.endswith("\n") or not self.text.strip():
            seq = seq[len(lead):]
        bos = len(self.session.tokenize(""))
        self.forced = seq
        return ForcedWritten(tuple(self.session.tokenize(seq)[bos:]), seq, "target")

    def _emit(self, ev: Event) -> Event:
        """Account one event of the combined stream (ids, streamed text, pieces)."""
        if isinstance(ev, Accepted | Written):
            self._gen_ids += ev.tokens
            self._streamed += ev.text
        self._pieces += self.splitter.feed(ev)
        return ev

    def _run(self, events: Iterator[Event]) -> Iterator[Event]:
        if self._pending_forced is not None:
            yield self._emit(self._pending_forced)
            self._streamed = ""
        done: Done | None = None
        while True:
            done = None
            try:
                for ev in events:
                    if isinstance(ev, Done):
                        done = ev
                    elif isinstance(ev, StatsUpdate) and self.phases:  # later phases: add up the earlier ones
                        yield self._emit(StatsUpdate(merge_stats([*self.phases, ev.stats])))
                    else:
                        yield self._emit(ev)
            finally:
                close = getattr(events, "close", None)
                if close is not None:
                    close()
            assert done is not None, "a generation ends with Done"
            if len(done.text) > len(self._streamed) and done.text.startswith(self._streamed):
                # text the loop released only into Done (held for a stop string, then interrupted)
                yield self._emit(Written((), done.text[len(self._streamed):], "target"))
            self.text += done.text
            self._streamed = ""
            self.phases.append(done.stats)
            self._remaining -= done.stats.n_tokens
            if done.reason != "max_tokens" or self._remaining <= 0 or not self._limited:
                break
            if self.splitter.thinking and self.splitter.inner_tokens >= (self.budget or 0):
                forced = self._force()
                yield self._emit(forced)
                self.text += forced.text
                self._streamed = ""
            cap = self._cap()
            self._limited = cap < self._remaining
            events = self._call(cap)
        self._pieces += self.splitter.finish()
        merged = merge_stats(self.phases)
        final = Done(done.reason, self.text, merged, done.message, done.stop_word)
        self._pieces += self.splitter.feed(final)
        yield final


def think(session: Session, prompt: Prompt, cfg: GenConfig, *, prefill: str = "",
          template_kwargs: Mapping[str, object] | None = None, budget: int | None = None) -> ThinkingRun:
    """`session.generate` with the reasoning split and an optional thinking budget (see the
    module docstring for what is exact and what is forced). Raises bad input at once."""
    return ThinkingRun(session, prompt, cfg, prefill=prefill, template_kwargs=template_kwargs, budget=budget)
