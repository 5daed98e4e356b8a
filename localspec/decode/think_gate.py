"""A reasoning model's thinking block stays free of the grammar; the answer after it does not.

A constrained turn on a thinking model (Qwen3, QwQ, R1 distills) must let the model think in
prose and hold only the answer to the grammar: llama.cpp and vLLM both shipped bugs at this
boundary (a grammar from the first token forbids `<think>`, so the model cannot reason, or a
grammar applied inside the block breaks the reasoning). The rule here, per position, a
function of the history alone (so the masked law stays a law and every verifier stays exact):

- inside a block (the prompt left one open, or the answer opened one): every token is
  allowed, until the close marker's tokens have been written; then the grammar starts;
- at the answer's first position, when the model may open a block: the grammar's tokens
  AND the open marker's first token are allowed; writing the marker enters the block;
- anywhere else: the grammar.

`ThinkGate` wraps the grammar's Matcher behind the same interface (decode/constrained.py),
so the loop, the drafters and the verifier rows need nothing else. Markers of several
tokens are matched token by token: inside a block the gate watches for the close
sequence; the open marker counts when its first token is written at the first position
(the rest of it is free text inside the block).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from localspec.decode.constrained import Matcher, stepwise_valid_prefix

FIRST, THINKING, ANSWER = "first", "thinking", "answer"


@dataclass
class _Step:
    state: str  # the state before the token
    seen: int  # close-marker tokens matched before the token
    consumed: bool  # the inner matcher consumed the token


@dataclass
class ThinkGate:
    """The grammar behind a thinking block (module docstring)."""

    inner: Matcher
    open_ids: tuple[int, ...]
    close_ids: tuple[int, ...]
    state: str = FIRST
    seen: int = 0  # how much of the close sequence the newest tokens match
    steps: list[_Step] = field(default_factory=list)
    n_vocab: int = 0

    # ------------------------------------------------------------------ reading
    def allowed(self, token: int) -> bool:
        if self.state == THINKING:
            return True
        if self.state == FIRST and self.open_ids and token == self.open_ids[0]:
            return True
        return self.inner.allowed(token)

    def mask(self) -> np.ndarray:
        if self.state == THINKING:
            return np.ones(self.n_vocab, dtype=bool)
        m = self.inner.mask()
        if self.state == FIRST and self.open_ids:
            m = m.copy()
            m[self.open_ids[0]] = True
        return m

    def valid_prefix(self, tokens: list[int]) -> int:
        return stepwise_valid_prefix(self, tokens)

    def forced(self, limit: int = 64) -> list[int]:
        return self.inner.forced(limit) if self.state == ANSWER else []

    # ------------------------------------------------------------------ moving
    def consume(self, tokens: list[int]) -> None:
        for t in tokens:
            if not self.allowed(t):
                raise ValueError(f"token {t} is refused here")
            step = _Step(self.state, self.seen, False)
            if self.state == FIRST and self.open_ids and t == self.open_ids[0]:
                self.state, self.seen = THINKING, 0
            elif self.state == THINKING:
                self.seen = _advance(self.close_ids, self.seen, t)
                if self.seen == len(self.close_ids):
                    self.state, self.seen = ANSWER, 0
            else:
                self.inner.consume([t])
                step.consumed = True
                self.state = ANSWER
            self.steps.append(step)

    def rollback(self, n: int) -> None:
        for _ in range(n):
            step = self.steps.pop()
            if step.consumed:
                self.inner.rollback(1)
            self.state, self.seen = step.state, step.seen

    def fork(self) -> ThinkGate:
        return ThinkGate(self.inner.fork(), self.open_ids, self.close_ids, self.state, self.seen,
                         list(self.steps), self.n_vocab)


def _advance(seq: tuple[int, ...], seen: int, token: int) -> int:
    """How much of `seq` the token stream matches after `token` (a short KMP-free restart:
    marker sequences are a few tokens)."""
    if seen < len(seq) and seq[seen] == token:
        return seen + 1
    return 1 if seq and seq[0] == token else 0


def think_gate(inner: Matcher, markers: object | None, prompt_text: str | None, n_vocab: int) -> Matcher:
    """The turn's matcher: the grammar alone, or behind the thinking block when the target
    is a thinking model whose prompt leaves room for one (a closed empty block, Qwen3's
    enable_thinking=false, leaves none)."""
    if markers is None or not getattr(markers, "close_ids", ()):
        return inner
    from localspec.thinking.split import ends_closed, starts_inside

    text = prompt_text or ""
    if ends_closed(text, markers):  # type: ignore[arg-type]
        return inner
    state = THINKING if starts_inside(text, markers) else FIRST  # type: ignore[arg-type]
    return ThinkGate(inner, tuple(markers.open_ids), tuple(markers.close_ids), state,  # type: ignore[attr-defined]
                     n_vocab=n_vocab)
