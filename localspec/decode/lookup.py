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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from localspec.decode.proposer import DraftTrie, Node
from localspec.sampling import SparseRow


@dataclass
class NgramIndex:
    """Latest start of each n-gram of `history` that has a continuation."""

    n_min: int = 2
    n_max: int = 4
    history: list[int] = field(default_factory=list)
    starts: dict[tuple[int, ...], int] = field(default_factory=dict)

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
        h = self.history
        for n in range(min(self.n_max, len(h)), self.n_min - 1, -1):
            s = self.starts.get(tuple(h[-n:]))
            if s is not None and s + n < len(h):
                return h[s + n : s + n + L], n
        return [], 0


def point_mass(token: int) -> SparseRow:
    """A drafted token's q: all mass on it."""
    return SparseRow(np.array([token], dtype=np.int64), np.ones(1))


class LookupProposer:
    """The `ngram` proposer: K = 1 lookup drafts from the turn's own history (no model).

    Same shape as decode/proposer.Proposer (propose / accept / observe), with `draft` None:
    nothing to keep in a draft KV cache. `propose` returns None when the history has no
    match; the loop then lets the target write the token itself.
    """

    draft = None

    def __init__(self, n_min: int = 2, n_max: int = 4) -> None:
        self.index = NgramIndex(n_min, n_max)
        self.matched = 0  # n-gram length of the last proposal (for the acceptance estimate)

    def propose(self, committed: list[int], K: int, L: int, stop=None, greedy_first: bool = False,
                per_draft: bool = False) -> DraftTrie | None:
        self.index.extend(committed)
        toks, self.matched = self.index.continuation(L)
        if not toks:
            return None
        trie = DraftTrie(K=1, path=[[]], q=[[]], conf=[[]], source="ngram")
        for depth, t in enumerate(toks, start=1):
            trie.nodes.append(Node(t, depth, [0], depth - 2))
            trie.path[0].append(depth - 1)
            trie.q[0].append(point_mass(t))
            trie.conf[0].append(1.0)
        return trie

    def accept(self, trie: DraftTrie, k: int, tau: int, token: int) -> None:
        """Nothing to keep: the next proposal reads the grown history."""

    def observe(self, tau: int, drafted: int, confs: list[float]) -> None:
        """The acceptance is learned by auto's LookupGate (decode/auto.py), not here."""


class ChainProposer:
    """Proposers tried in order (llama.cpp's `--spec-type ngram-simple,draft-simple`): the
    first that has a draft drafts this iteration. Which one drafted depends only on the
    history, never on this iteration's verification, so every lossless verifier stays exact."""

    def __init__(self, proposers: list) -> None:
        self.proposers = proposers
        self.last = proposers[0]
        # the draft model's KV (for the room check), if one is in the chain
        self.draft = next((p.draft for p in proposers if p.draft is not None), None)

    def propose(self, committed: list[int], K: int, L: int, stop=None, greedy_first: bool = False,
                per_draft: bool = False) -> DraftTrie | None:
        for p in self.proposers:
            trie = p.propose(committed, K, L, stop, greedy_first, per_draft)
            if trie is not None:
                self.last = p
                return trie
        return None

    @property
    def matched(self) -> int:
        """The match length of the lookup that drafted last (auto's gate prices by it)."""
        return getattr(self.last, "matched", 0)

    def accept(self, trie: DraftTrie, k: int, tau: int, token: int) -> None:
        self.last.accept(trie, k, tau, token)

    def observe(self, tau: int, drafted: int, confs: list[float]) -> None:
        self.last.observe(tau, drafted, confs)
