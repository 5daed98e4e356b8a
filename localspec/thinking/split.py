"""Thinking models: the visible text split into reasoning and answer, and stats per segment.

Qwen3, QwQ and the DeepSeek-R1 distills write a `<think>…</think>` block before the
answer. The decoding loops know nothing of it (they emit tokens); this module works above
them, on the public events only: every visible character arrives in exactly one
`Accepted.text` or `Written.text` (localspec.events), so a splitter that reads those, in
order, sees the whole answer and can route each piece to "reasoning" or "answer".

The markers come from the model (`Session.think_markers`, found in its vocabulary and chat
template by localspec.backend.hints). The split follows llama-server's
`--reasoning-format deepseek`: a block counts only at the start of the answer (a later
literal `<think>` is answer text), the reasoning is stripped of the whitespace around it
and the answer of the whitespace before it; a prompt that already opened the block (a
DeepSeek-R1-style template, or a prefill) starts inside it; a model that never writes a
marker has no reasoning. This is the only place the rule is written: `run`, `serve` and the
TUI all consume the splitter's pieces (localspec.thinking.pieces).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from localspec.events import Accepted, Done, Event, Stats, StatsUpdate, Written
from localspec.session import Message, Session, ThinkMarkers
from localspec.thinking.pieces import SEGMENTS, Piece, Segment

_PRE, _THINK, _AFTER, _ANSWER = "pre", "think", "after", "answer"

def markers_of(session: object) -> ThinkMarkers | None:
    """session.think_markers, tolerating test fakes and older sessions without it."""
    return getattr(session, "think_markers", None)


def starts_inside(prompt_text: str, markers: ThinkMarkers | None) -> bool:
    """Whether the prompt leaves the reasoning block open (its last marker is an open one):
    DeepSeek-R1-style templates end the generation prompt with `<think>\\n`."""
    if markers is None:
        return False
    return prompt_text.rfind(markers.open) > prompt_text.rfind(markers.close)


def ends_closed(prompt_text: str, markers: ThinkMarkers | None) -> bool:
    """Whether the prompt ends right after a closed block: Qwen3's template with
    enable_thinking=false writes an empty `<think>\n\n</think>\n\n`; the answer follows."""
    return markers is not None and prompt_text.rstrip().endswith(markers.close)


def _find(tokens: Sequence[int], ids: Sequence[int], start: int = 0) -> int:
    """Index just past the first occurrence of `ids` in tokens[start:], or -1."""
    n = len(ids)
    if not n:
        return -1
    for i in range(start, len(tokens) - n + 1):
        if tuple(tokens[i : i + n]) == tuple(ids):
            return i + n
    return -1


@dataclass
class SegmentStats:
    """What decoding did while the model was thinking, or while it was answering.

    `tokens` is exact (each token is attributed by where the markers fall); the iteration
    figures come from the StatsUpdate after each iteration, and an iteration whose tokens
    straddle the close marker goes whole to the segment that got more of them, so one
    iteration per generation can be attributed to the other side.
    """

    tokens: int = 0
    forced_tokens: int = 0  # the budget's forced close (not the target's choice)
    iterations: int = 0
    target_calls: int = 0
    iteration_tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0
    seconds: float = 0.0

    @property
    def block_efficiency(self) -> float:
        """Tokens per target call in this segment (1 for AR)."""
        return self.iteration_tokens / self.target_calls if self.target_calls else 0.0

    @property
    def acceptance(self) -> float:
        """Accepted / drafted tokens in this segment (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "forced_tokens": self.forced_tokens, "iterations": self.iterations,
                "target_calls": self.target_calls, "drafted": self.drafted, "accepted": self.accepted,
                "acceptance": self.acceptance, "block_efficiency": self.block_efficiency,
                "seconds": self.seconds}


@dataclass
class ReasoningSplitter:
    """Streams events into Pieces (pieces.py) and keeps per-segment stats: the one split rule.

    `feed(event)` for every event of a generation, `finish()` at the end (releases text
    held back while a marker or trailing whitespace was undecided). `inside=True` when the
    prompt already opened the block (see `starts_inside`), `closed=True` when it ends
    right after one (`ends_closed`). Without markers everything is answer, unchanged.
    """

    markers: ThinkMarkers | None
    inside: bool = False
    closed: bool = False
    state: str = field(init=False)
    reasoning: str = field(init=False, default="")
    answer: str = field(init=False, default="")
    inner_tokens: int = field(init=False, default=0)  # tokens strictly inside the block (the budget's count)
    opened: bool = field(init=False, default=False)  # the block was open at some point
    stats: dict[str, SegmentStats] = field(init=False)
    _held: str = field(init=False, default="")  # undecided: always the last characters fed
    _fed: int = field(init=False, default=0)  # visible characters fed so far (where Piece.start counts)
    _emitted: bool = field(init=False, default=False)
    _pre_tokens: int = field(init=False, default=0)
    _iter: dict[str, int] = field(init=False)
    _prev: Stats | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.state = _ANSWER if self.markers is None else _THINK if self.inside else _AFTER if self.closed else _PRE
        self.opened = self.state == _THINK
        self.stats = {s: SegmentStats() for s in SEGMENTS}
        self._iter = {s: 0 for s in SEGMENTS}

    # ------------------------------------------------------------------ public
    @property
    def thinking(self) -> bool:
        """Still inside the reasoning block (the budget applies)."""
        return self.state == _THINK

    @property
    def answering(self) -> bool:
        """The answer has started (or the block closed): no budget applies any more."""
        return self.state in (_AFTER, _ANSWER)

    def feed(self, ev: Event) -> list[Piece]:
        """The pieces this event adds (empty for events that carry no visible text)."""
        if isinstance(ev, StatsUpdate):
            self._account(ev.stats)
            return []
        if isinstance(ev, Accepted):
            return self._visible(ev.tokens, ev.text, "draft", forced=False)
        if isinstance(ev, Written):
            forced = getattr(ev, "forced", False)
            return self._visible(ev.tokens, ev.text, "forced" if forced else ev.kind, forced=forced)
        if isinstance(ev, Done):
            self._account(ev.stats)
        return []

    def finish(self) -> list[Piece]:
        """Release held text at the end of the generation."""
        held, self._held = self._held, ""
        at = self._fed - len(held)
        out: list[Piece] = []
        if self.state == _PRE:
            self._count("answer", self._pre_tokens)
            self._pre_tokens = 0
            if held:
                out.append(Piece("answer", held, 0, "target", at))
                self.answer += held
        elif self.state == _THINK and held.strip():
            out.append(Piece("reasoning", held.rstrip(), 0, "target", at))
            self.reasoning += held.rstrip()
        return out

    def split(self, text: str) -> tuple[str, str]:
        """(reasoning, answer) of a whole text (no token accounting)."""
        for _ in self._text(text):
            pass
        self.finish()
        return self.reasoning, self.answer

    # ------------------------------------------------------------------ text
    def _text(self, text: str) -> list[tuple[Segment, str, int]]:
        """The state machine over characters: returns decided text with where it starts in
        the visible text, holds the undecided. `at` follows buf[0] as buf loses its head."""
        m = self.markers
        buf, self._held = self._held + text, ""
        at, self._fed = self._fed + len(text) - len(buf), self._fed + len(text)
        out: list[tuple[Segment, str, int]] = []
        while True:
            if self.state == _PRE:
                assert m is not None
                s = buf.lstrip()
                if not s or (m.open.startswith(s) and s != m.open):
                    self._held = buf  # whitespace or a partial open marker: undecided
                    break
                if s.startswith(m.open):
                    self.state, at, buf = _THINK, at + len(buf) - len(s) + len(m.open), s[len(m.open) :]
                    self.opened = True
                    continue
                self.state = _ANSWER  # text before any marker: no reasoning, keep it verbatim
                continue
            if self.state == _THINK:
                assert m is not None
                i = buf.find(m.close)
                body = buf if i < 0 else buf[:i]
                tail = ""
                if i < 0:
                    k = next((k for k in range(min(len(m.close) - 1, len(buf)), 0, -1) if buf.endswith(m.close[:k])), 0)
                    body, tail = buf[: len(buf) - k], buf[len(buf) - k :]
                lead = 0 if self._emitted else len(body) - len(body.lstrip())
                body = body[lead:]
                kept = body.rstrip()
                if kept:
                    out.append(("reasoning", kept, at + lead))
                    self._emitted = True
                if i < 0:
                    self._held = body[len(kept) :] + tail
                    break
                self.state, at, buf = _AFTER, at + i + len(m.close), buf[i + len(m.close) :]
                continue
            if self.state == _AFTER:
                s = buf.lstrip()
                if not s:
                    break  # whitespace after the block is the template's, not the answer's
                self.state, at, buf = _ANSWER, at + len(buf) - len(s), s
                continue
            if buf:
                out.append(("answer", buf, at))
            break
        for seg, t, _ in out:
            if seg == "reasoning":
                self.reasoning += t
            else:
                self.answer += t
        return out

    # ------------------------------------------------------------------ tokens
    def _visible(self, tokens: tuple[int, ...], text: str, kind: str, *, forced: bool) -> list[Piece]:
        before, inner = self.state, self.inner_tokens
        decided = self._text(text)
        counts = self._attribute(list(tokens), before, self.state)
        if forced:  # not the target's tokens: counted apart, never against the budget
            self.stats["reasoning"].forced_tokens += len(tokens)
            self.inner_tokens = inner
            counts = {s: 0 for s in SEGMENTS}
        else:
            for seg, n in counts.items():
                self._count(seg, n)
        texts = {s: "".join(t for g, t, _ in decided if g == s) for s in SEGMENTS}  # one run each at most
        frontier = self._fed - len(self._held)  # where text not yet decided starts
        starts = {s: next((a for g, _, a in decided if g == s), frontier) for s in SEGMENTS}
        return [Piece(s, texts[s], counts[s], kind, starts[s]) for s in SEGMENTS if texts[s] or counts[s]]

    def _attribute(self, tokens: list[int], before: str, after: str) -> dict[str, int]:
        """How many of this event's tokens are reasoning / answer, by where the markers are."""
        m = self.markers
        n = len(tokens)
        counts = {"reasoning": 0, "answer": 0}
        if before in (_AFTER, _ANSWER) or m is None:
            counts["answer"] = n
            return counts
        if before == _PRE and after == _PRE:
            self._pre_tokens += n
            return counts
        if before == _PRE and not self.opened:  # text before any marker: no reasoning at all
            counts["answer"] = n + self._pre_tokens
            self._pre_tokens = 0
            return counts
        start = 0
        if before == _PRE:  # the block opened in this event: what came before is its preamble
            start = _find(tokens, m.open_ids)
            start = n if start < 0 else start
            counts["reasoning"] += self._pre_tokens + start
            self._pre_tokens = 0
        if after == _THINK:
            counts["reasoning"] += n - start
            self.inner_tokens += n - start
            return counts
        end = _find(tokens, m.close_ids, start)  # the block closed in this event
        if end < 0:  # the marker's tokens are not all in this event: count the event inside
            end, inner = n, n - start
        else:
            inner = end - start - len(m.close_ids)
        counts["reasoning"] += end - start
        counts["answer"] += n - end
        self.inner_tokens += inner
        return counts

    def _count(self, seg: str, n: int) -> None:
        self.stats[seg].tokens += n
        self._iter[seg] += n

    def _account(self, st: Stats) -> None:
        """Attribute the iterations since the last snapshot to the segment that got more tokens."""
        prev = self._prev
        self._prev = st
        d_iter = st.iterations - (prev.iterations if prev else 0)
        if d_iter <= 0 and (prev is not None and st.n_tokens == prev.n_tokens):
            return
        r, a = self._iter["reasoning"], self._iter["answer"]
        seg = "reasoning" if r > a or (r == a and self.state == _THINK) else "answer"
        s = self.stats[seg]
        s.iterations += max(0, d_iter)
        s.target_calls += st.target_calls - (prev.target_calls if prev else 0)
        s.iteration_tokens += st.n_tokens - (prev.n_tokens if prev else 0)
        s.drafted += st.drafted - (prev.drafted if prev else 0)
        new = st.accepted_lengths[len(prev.accepted_lengths) if prev else 0 :]
        s.accepted += sum(new)
        s.verify_steps += len(new)
        s.seconds += st.seconds - (prev.seconds if prev else 0.0)
        self._iter = {x: 0 for x in SEGMENTS}


def split_text(text: str, markers: ThinkMarkers | None, *, inside: bool = False) -> tuple[str, str]:
    """(reasoning, answer) of a finished text, by the same rules as the streaming splitter."""
    return ReasoningSplitter(markers, inside).split(text)


def strip_reasoning(text: str, markers: ThinkMarkers | None) -> str:
    """The answer alone: what a past assistant turn sends back to the template.

    A turn whose template opened the block in the generation prompt (DeepSeek-R1 style)
    was stored without its open marker: a close marker with no open one before it means
    the turn began inside the block."""
    if markers is None:
        return text
    i = text.find(markers.close)
    inside = i >= 0 and markers.open not in text[:i]
    return split_text(text, markers, inside=inside)[1]


def answer_only(messages: Iterable[Message], markers: ThinkMarkers | None) -> list[dict[str, str]]:
    """The history rule: past assistant turns go back with their answer only.

    Qwen3's model card: "the historical model output should only include the final output
    part and does not need to include the thinking content". Done here, whatever the
    template would do with a `<think>` block or a `reasoning_content` field.
    """
    out = []
    for m in messages:
        d = dict(m)
        if d.get("role") == "assistant":
            d.pop("reasoning_content", None)
            d["content"] = strip_reasoning(d.get("content") or "", markers)
        out.append(d)
    return out


Mode = Literal["on", "off", "auto"]


def thinking_kwargs(session: Session, mode: str, base: Mapping[str, object] | None = None) -> dict[str, object]:
    """Template kwargs for --reasoning on|off|auto: enable_thinking where the template has it.

    Whether it has it is found by rendering a one-message conversation both ways (no
    template source is needed); `auto` leaves the template's own default. Soft switches
    (`/think`, `/no_think` in the user text) pass through untouched either way.
    """
    out = dict(base or {})
    if mode == "auto" or "enable_thinking" in out:
        return out
    if has_thinking_switch(session):
        out["enable_thinking"] = mode == "on"
    return out


def has_thinking_switch(session: Session) -> bool:
    """Whether the chat template reacts to enable_thinking."""
    probe = [{"role": "user", "content": "x"}]
    try:
        return session.render(probe, template_kwargs={"enable_thinking": True}) != session.render(
            probe, template_kwargs={"enable_thinking": False})
    except Exception:  # noqa: BLE001 - a template that raises on unknown variables has no switch
        return False


def opens_block(session: Session, kwargs: Mapping[str, object] | None = None) -> bool:
    """Whether the template's generation prompt already opens the reasoning block (then a
    chat turn's text starts inside it: DeepSeek-R1 style)."""
    markers = markers_of(session)
    if markers is None:
        return False
    try:
        text = session.render([{"role": "user", "content": "x"}], template_kwargs=kwargs)
    except Exception:  # noqa: BLE001 - a session that cannot render (a test fake): assume not
        return False
    return isinstance(text, str) and starts_inside(text, markers)


def segment_summary(st: SegmentStats, *, speculative: bool = True) -> str:
    """One line for the folded thinking block and `run`'s stderr."""
    line = f"thought for {st.tokens} tokens, {st.seconds:.1f} s"
    if speculative and st.target_calls:
        line += f", block eff {st.block_efficiency:.2f}"
    if st.forced_tokens:
        line += " (budget: close forced)"
    return line
