"""Prompt lookup: drafts that cost no model call, read off the text the turn already has.

Much of what people ask a coder model is an edit ("add type hints", "rename X", "return the
whole file with Y changed"): most of the answer is already in the prompt. When the last n
tokens of the history (prompt + everything generated) occurred before, what followed them
then is a draft for what follows now -- llama.cpp's `ngram-simple`, vLLM's `ngram`,
prompt-lookup decoding. It is a point mass: q = 1 on each drafted token, so every lossless
verifier applies unchanged (sd accepts token x with probability p(x) and resamples from p
without x; at T = 0 it is accepted when it is the target's argmax). tests/test_verify_exact.py
enumerates point-mass drafts to prove it.

The index maps every n-gram (n_min..n_max) of the history to its latest start whose
continuation exists; it is extended incrementally as the history grows, so a lookup costs
a few dict probes per iteration, never a scan.

Where the continuation was found is part of the bet (`origin`): text the turn was given (the
prompt: a file being re-quoted, the conversation so far) is copied far more faithfully than the
answer's own earlier words (a list's repeated "- **", a sentence's shape). On the bench's tuning
half a 2-token match continued right 89 % of the time from the prompt (62 % in chat) and 41 %
from the answer, and chat's long matches all came from the answer (docs/performance.md#origin). A
fill-in-the-middle prompt has two given texts that are different bets again: the code before
the cursor (PREFIX) and after it (SUFFIX; `Regions`).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from localspec.decode.drafters.base import (
    ANSWER,
    LOOKUP,
    PREFIX,
    PROMPT,
    SUFFIX,
    DrafterBase,
    DraftRequest,
)
from localspec.decode.drafters.trie import DraftTrie, chain_trie

if TYPE_CHECKING:
    from localspec.costmodel import CostModel
    from localspec.decode.turn import Turn


RUN_CAP = 32  # how far back a match's agreement is measured (auto needs to know "long", not how long)


@dataclass
class NgramIndex:
    """Latest start of each n-gram of `history` that has a continuation."""

    n_min: int = 2
    n_max: int = 4
    history: list[int] = field(default_factory=list)
    starts: dict[tuple[int, ...], int] = field(default_factory=dict)
    at: int = -1  # where the last match's continuation starts in `history` (-1: no match)
    run: int = 0  # how far back (up to RUN_CAP) the last match's source agrees with the tail
    # tokens a continuation stops before (the model's control and end-of-generation tokens:
    # Model.control_ids). A match in the prompt's last lines continues into the chat
    # template's `<|im_end|>\n<|im_start|>assistant\n`, never what an answer writes there: on
    # the code tuning half such long bets (31 tokens) were rejected right at that marker
    barrier: Container[int] = frozenset()

    def extend(self, tokens: list[int]) -> None:
        """Make the index cover `tokens` (a new history unless it extends the old one)."""
        h = self.history
        if len(tokens) < len(h) or tokens[: len(h)] != h:
            self.history, self.starts = [], {}
            h = self.history
        old = len(h)
        h.extend(tokens[old:])
        # an n-gram starting at s has its continuation at s + n: index it once that exists
        for c in range(max(old, 1), len(h)):
            for n in range(self.n_min, self.n_max + 1):
                s = c - n
                if s >= 0:
                    self.starts[tuple(h[s:c])] = s

    def continuation(self, L: int) -> tuple[list[int], int]:
        """Up to L tokens that followed the longest earlier occurrence of the history's tail,
        and the length of the n-gram matched (0: no match)."""
        return self.match(self.history, L)

    def match(self, tail: list[int], L: int) -> tuple[list[int], int]:
        """Up to L tokens that followed, in the indexed history, the longest n-gram ending
        `tail` (the history itself, or another text: a prediction is matched against the
        turn's history), and the n-gram's length (0: no match)."""
        h = self.history
        for n in range(min(self.n_max, len(tail)), self.n_min - 1, -1):
            s = self.starts.get(tuple(tail[-n:]))
            if s is not None and s + n < len(h):
                out = h[s + n : s + n + L]
                if self.barrier:
                    out = _before_barrier(out, self.barrier)
                    if not out:  # it continues with a marker: no draft from this match
                        continue
                self.at = s + n
                self.run = agreement(h, s + n, tail)
                return out, n
        self.at, self.run = -1, 0
        return [], 0


def _before_barrier(tokens: list[int], barrier: Container[int]) -> list[int]:
    """`tokens` up to (not including) the first one in `barrier`."""
    for i, t in enumerate(tokens):
        if t in barrier:
            return tokens[:i]
    return tokens


def agreement(source: Sequence[int], end: int, tail: Sequence[int]) -> int:
    """How many tokens before source[end] agree with the end of `tail` (up to RUN_CAP): the
    length of the copy a match sits in. An n-gram index keys matches up to
    n_max tokens; a copy in progress (a quoted file being re-written) agrees much further
    back, and its continuation is right much further ahead (auto's long bets: costmodel/lookup.py)."""
    k, top = 0, min(RUN_CAP, end, len(tail))
    while k < top and source[end - 1 - k] == tail[-1 - k]:
        k += 1
    return k



@dataclass(frozen=True)
class Regions:
    """Where a turn's history changes meaning: its answer starts at `answer_start`; in a
    fill-in-the-middle prompt the text after the cursor spans `suffix` (start, end)."""

    answer_start: int
    suffix: tuple[int, int] | None = None

    def origin(self, at: int) -> str:
        """Where a continuation starting at history position `at` was found ("" for none)."""
        if at < 0:
            return ""
        if at >= self.answer_start:
            return ANSWER
        if self.suffix is None:
            return PROMPT
        return SUFFIX if self.suffix[0] <= at < self.suffix[1] else PREFIX


def regions_of(prompt: Sequence[int], suf: int, mid: int) -> Regions:
    """The regions of a turn whose given text is `prompt`: a FIM prompt (its last `mid`
    token after a `suf` token, the ids the model's FIM tokens have; -1: none) has a suffix
    between the two (backend/fim.build_infill's layout), any other prompt has none."""
    n = len(prompt)
    if suf >= 0 and mid >= 0:
        m = next((i for i in range(n - 1, -1, -1) if prompt[i] == mid), -1)
        s = next((i for i in range(m - 1, -1, -1) if prompt[i] == suf), -1) if m > 0 else -1
        if s >= 0:
            return Regions(n, (s + 1, m))
    return Regions(n)


class NgramDrafter(DrafterBase):
    """The `ngram` drafter: K = 1 lookup drafts from the turn's own history (no model).

    `propose` returns None when the history has no match; the loop then lets the target
    write the token itself. The acceptance is learned by auto's LookupGate per match length.
    """

    name = "ngram"
    kind = LOOKUP

    def __init__(self, n_min: int = 2, n_max: int = 4, regions: Regions | None = None,
                 barrier: Container[int] = frozenset()) -> None:
        self.index = NgramIndex(n_min, n_max, barrier=barrier)
        self.matched = 0  # n-gram length of the last proposal (for the acceptance estimate)
        self.run = 0  # how far back its source agrees with the history (NgramIndex.run)
        self.regions = regions  # where the turn's answer (and a FIM suffix) lie (None: not told)
        self.origin = ""

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        self.index.extend(req.committed)
        toks, self.matched = self.index.continuation(req.L)
        self.run = self.index.run
        self.origin = self.regions.origin(self.index.at) if self.regions is not None else ""
        return chain_trie(toks, self.name) if toks else None


def build(turn: Turn, auto: CostModel | None = None) -> NgramDrafter:
    """The registry's builder (--spec-ngram-min / --spec-ngram-max)."""
    return NgramDrafter(turn.cfg.ngram_min, turn.cfg.ngram_max, turn_regions(turn), lookup_barrier(turn))


def lookup_barrier(turn: Turn) -> Container[int]:
    """The tokens the turn's lookups stop before (NgramIndex.barrier): the target's control
    and end-of-generation tokens (none for a model object that does not list them: tests' fakes)."""
    return getattr(turn.target_model, "control_ids", frozenset())


def turn_regions(turn: Turn) -> Regions:
    """The turn's regions: its prompt is what the target had committed when it started."""
    fim = turn.target_model.fim
    return regions_of(turn.target.committed[: turn.answer_start], fim.suf, fim.mid)
