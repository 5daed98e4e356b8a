"""A tool call's grammar from its opening marker on: free text before it, the call held after.

Under `tool_choice: auto` the model may answer in prose or call a tool; a small model left
alone writes broken calls (llama-server returned 1 valid call in 4 on Qwen2.5-Coder-0.5B),
so the call must be constrained, but only once the model has chosen to call. The rule here,
per position, a function of the history alone (so the masked law stays a law and every
verifier stays exact, as ThinkGate's: tests/test_tool_gate.py enumerates it):

- FREE: every token is allowed; the gate watches the written tokens for the trigger (the
  format's opening marker, `<tool_call>`, as the target tokenizes it);
- the trigger's last token written: GRAMMAR, a fresh copy of the call's grammar
  (toolcall/grammar.py: `{"name": one of the tools, "arguments": its schema}`);
- in GRAMMAR, until the call is complete only the grammar's tokens; once the grammar may end,
  a token it does not take frees the model again (FREE), which closes the tag, ends the turn
  or writes the trigger again for another call (a new copy of the grammar each time);
- FORCED (`required` or a named function): only the trigger's tokens, one by one, then
  GRAMMAR: the answer starts with a call; once it is complete, strictly the closing marker
  (CLOSING), then the end of the turn or, with parallel calls, another trigger (DONE): no
  prose after the call, no end before its closing marker. An empty trigger (Llama's bare
  JSON) is the plain grammar from the first token: no gate is made (`tool_gate`).

Why a gate and not llguidance alone: llguidance's Lark can say "free text, then the marker,
then the call" (`start: TEXT | TEXT <tool_call> call`), but the free text then runs through
the parser (a mask at every drafted position of the prose, where the gate costs nothing), the
marker must be written per tokenizer (a special token by name, or text; Qwen's `<tool_call>`
is one user-defined token), and "free again after the call" needs the prose rule twice. The
gate matches the marker's token ids (a marker the model spells in other tokens is not seen:
that call is parsed from text unconstrained) and wraps the Matcher interface, so the loop,
the drafters, the verifier rows and a thinking model's ThinkGate around it need nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from localspec.decode.constrained import Matcher, stepwise_valid_prefix

FREE, FORCED, GRAMMAR, CLOSING, DONE = "free", "forced", "grammar", "closing", "done"


@dataclass
class _Step:
    state: str  # the state before the token
    seen: int  # marker tokens matched before the token
    consumed: bool  # the current call's matcher consumed the token
    opened: bool  # the token completed the trigger: a new call's matcher was started


@dataclass
class ToolGate:
    """The call's grammar behind its trigger (module docstring). `root` is a pristine
    matcher at the grammar's start; each call gets a fork of it. Strict (not lazy): after
    a call only its closing marker (`close`), then an end-of-generation id (`eog`) or, with
    `parallel`, the trigger of another call."""

    root: Matcher
    trigger: tuple[int, ...]
    state: str = FREE
    n_vocab: int = 0
    seen: int = 0
    calls: list[Matcher] = field(default_factory=list)
    steps: list[_Step] = field(default_factory=list)
    close: tuple[int, ...] = ()
    eog: frozenset[int] = frozenset()
    parallel: bool = True
    lazy: bool = True

    def __post_init__(self) -> None:
        if self.state == GRAMMAR and not self.calls:
            self.calls.append(self.root.fork())
        if self.state == FORCED:
            self.lazy = False

    # ------------------------------------------------------------------ reading
    def _ends(self) -> bool:
        """The current call may end here (its grammar allows an end-of-generation token)."""
        return _may_end(self.calls[-1])

    def _after(self, token: int) -> bool:
        """Strict: what may follow a complete call (its closing marker, else the end)."""
        if self.close:
            return token == self.close[0]
        return self._done_allows(token)

    def _done_allows(self, token: int) -> bool:
        return token in self.eog or (self.parallel and token == self.trigger[0])

    def allowed(self, token: int) -> bool:
        if self.state == FREE:
            return True
        if self.state == FORCED:
            return token == self.trigger[self.seen]
        if self.state == CLOSING:
            return token == self.close[self.seen]
        if self.state == DONE:
            return self._done_allows(token)
        m = self.calls[-1]
        if self.lazy:
            return m.allowed(token) or self._ends()
        return (token not in self.eog and m.allowed(token)) or (self._ends() and self._after(token))

    def mask(self) -> np.ndarray:
        if self.state == FREE or (self.state == GRAMMAR and self.lazy and self._ends()):
            return np.ones(self.n_vocab, dtype=bool)
        if self.state in (FORCED, CLOSING, DONE):
            m = np.zeros(self.n_vocab, dtype=bool)
            if self.state == DONE:
                m[list(self.eog)] = True
                if self.parallel:
                    m[self.trigger[0]] = True
            else:
                m[(self.trigger if self.state == FORCED else self.close)[self.seen]] = True
            return m
        m = self.calls[-1].mask()
        if not self.lazy:
            m = m.copy()
            m[list(self.eog)] = False
            if self._ends():
                if self.close:
                    m[self.close[0]] = True
                else:
                    m[list(self.eog)] = True
                    if self.parallel:
                        m[self.trigger[0]] = True
        return m

    def valid_prefix(self, tokens: list[int]) -> int:
        return stepwise_valid_prefix(self, tokens)

    def forced(self, limit: int = 64) -> list[int]:
        if self.state == FORCED:
            return list(self.trigger[self.seen :][:limit])
        if self.state == CLOSING:
            return list(self.close[self.seen :][:limit])
        if self.state == GRAMMAR and not self._ends():
            return self.calls[-1].forced(limit)
        return []

    # ------------------------------------------------------------------ moving
    def consume(self, tokens: list[int]) -> None:
        for t in tokens:
            if not self.allowed(t):
                raise ValueError(f"token {t} is refused here")
            step = _Step(self.state, self.seen, False, False)
            if self.state == GRAMMAR:
                m = self.calls[-1]
                if m.allowed(t) and (self.lazy or t not in self.eog):
                    m.consume([t])
                    step.consumed = True
                elif self.lazy:  # the call is complete and the model goes on: free text again
                    self.state, self.seen = FREE, _advance(self.trigger, 0, t)
                elif self.close:  # strict: the closing marker
                    self.state, self.seen = CLOSING, 1
                else:
                    self.state, self.seen = DONE, 0
                    self._done(t)
            elif self.state == CLOSING:
                self.seen += 1
            elif self.state == DONE:
                self._done(t)
            else:  # FREE or FORCED: count the trigger
                self.seen = _advance(self.trigger, self.seen, t)
            if self.state == CLOSING and self.seen == len(self.close):
                self.state, self.seen = DONE, 0
            if self.state in (FREE, FORCED) and self.trigger and self.seen == len(self.trigger):
                self.state, self.seen = GRAMMAR, 0
                self.calls.append(self.root.fork())
                step.opened = True
            self.steps.append(step)

    def _done(self, token: int) -> None:
        """DONE: an end id keeps it; the trigger's first token starts another call."""
        if token not in self.eog:
            self.state, self.seen = FORCED, 1

    def rollback(self, n: int) -> None:
        for _ in range(n):
            step = self.steps.pop()
            if step.opened:
                self.calls.pop()
            if step.consumed:
                self.calls[-1].rollback(1)
            self.state, self.seen = step.state, step.seen

    def fork(self) -> ToolGate:
        return ToolGate(self.root, self.trigger, self.state, self.n_vocab, self.seen,
                        [m.fork() for m in self.calls], list(self.steps), self.close, self.eog,
                        self.parallel, self.lazy)


def _may_end(m: Matcher) -> bool:
    """Whether the call's grammar accepts here (constrain.Matcher.can_end: it may end)."""
    can = getattr(m, "can_end", None)
    return bool(can()) if callable(can) else False


def _advance(seq: tuple[int, ...], seen: int, token: int) -> int:
    """How much of `seq` the newest tokens match after `token` (markers are a few tokens)."""
    if seen < len(seq) and seq[seen] == token:
        return seen + 1
    return 1 if seq and seq[0] == token else 0


def tool_gate(inner: Matcher, trigger: tuple[int, ...], lazy: bool, n_vocab: int, *, close: tuple[int, ...] = (),
              eog: Iterable[int] = (), parallel: bool = True) -> Matcher:
    """The turn's matcher for a tool call: lazy (`auto`) starts FREE, otherwise the trigger
    is FORCED and the call ends strictly (closing marker, then the end or another call);
    with no trigger the grammar holds from the first token (the plain matcher)."""
    if not trigger:
        return inner
    return ToolGate(inner, tuple(trigger), FREE if lazy else FORCED, n_vocab, close=tuple(close),
                    eog=frozenset(int(t) for t in eog), parallel=parallel, lazy=lazy)
