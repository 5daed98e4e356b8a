"""Suffix decoding (`--spec-type suffix`): drafts from everything the session has seen.

The n-gram lookup (decode/drafters/lookup.py) reads one turn's own text and copies the latest match.
SuffixDecoding (Oliaro et al., arXiv 2411.04975; vLLM's `suffix` method) keeps one suffix
structure over many documents -- here every turn's prompt and answer, and in `serve` every
request's -- with counts: the continuation is the most *frequent* one, each drafted token
carries an estimated chance (the product of child count / parent count along the walk),
and the draft stops where that chance falls below `min_prob`, so its length follows how
sure the text is. A longer match earns a longer draft (at most `factor` x its length).

The structure is a *virtual* suffix trie. A trie node is a token string s of at most `depth`
tokens; its count is the number of occurrences of s in the stored documents; its children
are the tokens that followed them. Stored as nodes that is up to N x depth Python objects for
N tokens (hundreds of MB at N = 100k); here the documents are one flat int32 array and a
dict maps each token pair to the positions where it ends, so the trie is N positions, and a
node's occurrences are recovered when needed: the candidates that end with the context's last
pair, compared backwards with the context in one numpy gather, give every candidate's match
length, hence every node on the context's path at once (those whose match is >= its depth).
The walk down from a node keeps the occurrences that agree with the tokens chosen so far.

A memory bound (`max_tokens`) keeps a long-running server's structure bounded: the oldest
documents go first (SuffixDecoding's FIFO eviction of cached requests), then the buffer and
the index are rebuilt at once with numpy, down to 3/4 of the bound so that it happens rarely.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from localspec.decode.drafters.base import LOOKUP, DrafterBase, DraftRequest
from localspec.decode.drafters.trie import DraftTrie, chain_trie

if TYPE_CHECKING:
    from localspec.costmodel import CostModel
    from localspec.verify import Decision

SEP = -1  # between documents (and after the last token): no match or continuation crosses it
SLACK = 256  # free cells kept after the last token, so a walk reads SEP past it, never off the end
OVERLAP = 64  # tokens a new document repeats of the history it shares with an earlier one
RECENT = 8  # earlier documents a new one is compared with for a shared history
CANDIDATES = 1024  # newest occurrences of the context's last pair that a lookup compares
MAX_WALKS = 4  # match lengths a lookup walks down from (longest first; pruned by their cap)
DEFAULT_MAX_TOKENS = 500_000


# a pair's dict key, a * MIX + b: one int per pair (b < 2^32 < MIX), and unlike (a << 32) | b
# its low bits, where a dict starts probing, depend on a too (pairs ending in the same
# frequent token would otherwise collide); fits int64 for any vocabulary below 2^30
MIX = (1 << 32) + 0x9E3779B1


def _key(a: int, b: int) -> int:
    return a * MIX + b


@dataclass
class _Doc:
    """A stored document: buf[start:end], and its whole history while it is one of the
    newest (a new one is compared with those for a shared prefix; sync extends the open one)."""

    start: int
    end: int
    history: list[int] | None


@dataclass
class SuffixDraft:
    """A continuation: its tokens, each token's estimated chance of being right, the length
    of the matched suffix it continues, and its score (the expected number of right tokens)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    match: int = 0
    score: float = 0.0


class SuffixStore:
    """Documents (token sequences) in one flat array, with a pair -> positions index.

    `sync(history)` keeps an *open* document equal to a growing history (a turn's prompt and
    answer so far; the next chat turn extends it); `insert(tokens)` adds a finished one;
    `speculate(context, L)` drafts the continuation of the context's longest suffix match.
    """

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS, candidates: int = CANDIDATES) -> None:
        self.max_tokens = max_tokens
        self.candidates = candidates
        self.buf = np.full(4096, SEP, dtype=np.int32)
        self.n = 1  # buf[0] is SEP: a backward comparison never runs off the front
        self.index: dict[int, list[int]] = {}  # pair key -> ascending positions of its 2nd token
        self.docs: deque[_Doc] = deque()  # oldest first
        self.open: _Doc | None = None  # the document sync() extends (docs[-1])
        self.live = 0  # tokens stored (the bound's measure)
        self.rebuilds = 0

    # ------------------------------------------------------------------ building
    def sync(self, history: Sequence[int]) -> None:
        """Make the open document hold `history`: append what extends it, else close it and
        open a new one (storing once what the new history shares with a recent document)."""
        if not isinstance(history, list):
            history = list(history)  # a list compares equal to a list only
        if self.continues(history):
            o = self.open.history  # type: ignore[union-attr]
            if len(history) > len(o):
                new = list(history[len(o):])
                o.extend(new)
                self._append(new)
            return
        tokens = list(history)
        recent = [d.history for d in list(self.docs)[-RECENT:] if d.history is not None]
        shared = max((_shared_prefix(h, tokens) for h in recent), default=0)
        self.open = self._new_doc(tokens)
        self._append(tokens[max(0, shared - OVERLAP):])

    def continues(self, history: Sequence[int]) -> bool:
        """Whether `history` extends the open document (the same conversation, grown)."""
        o = self.open.history if self.open is not None else None
        if o is None or len(history) < len(o):
            return False
        h = history if isinstance(history, list) else list(history)  # a list equals a list only
        return h[: len(o)] == o  # one slice per call: sync asks on every propose

    def insert(self, tokens: Sequence[int]) -> None:
        """Add a finished document (a past answer, a file): sync() never extends it."""
        self._new_doc(list(tokens))
        self.open = None
        self._append(list(tokens))

    def _new_doc(self, history: list[int]) -> _Doc:
        if self.buf[self.n - 1] != SEP:
            self.n += 1  # leave one SEP after the previous document
        if len(self.docs) >= RECENT:
            self.docs[-RECENT].history = None  # only the newest are compared with a new one
        doc = _Doc(self.n, self.n, history)
        self.docs.append(doc)
        return doc

    def _append(self, tokens: list[int]) -> None:
        """Extend the last document (the loop: one dict append per token)."""
        if not tokens:
            return
        need = self.n + len(tokens) + SLACK
        if need > len(self.buf):
            grown = np.full(max(need, 2 * len(self.buf)), SEP, dtype=np.int32)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        n, index = self.n, self.index
        self.buf[n : n + len(tokens)] = tokens
        prev = int(self.buf[n - 1])
        for t in tokens:
            if prev != SEP:
                key = prev * MIX + t
                lst = index.get(key)
                if lst is None:
                    index[key] = [n]
                else:
                    lst.append(n)
            prev = t
            n += 1
        self.n = n
        self.docs[-1].end = n
        self.live += len(tokens)
        if self.live > self.max_tokens:
            self._evict()

    def _evict(self) -> None:
        """Drop the oldest documents (the open one last, its head if it alone is too long)
        down to 3/4 of the bound, then rebuild the array and the index from what is kept."""
        goal = max(1, self.max_tokens * 3 // 4)
        while len(self.docs) > 1 and self.live > goal:
            d = self.docs.popleft()
            self.live -= d.end - d.start
        if self.live > goal:  # one document longer than the bound: keep its newest tokens
            self.docs[0].start = self.docs[0].end - goal
            self.live = goal
        parts = []
        at = 1
        for d in self.docs:
            parts += [self.buf[d.start : d.end], np.full(1, SEP, dtype=np.int32)]
            d.start, d.end = at, at + d.end - d.start
            at = d.end + 1
        n = self.docs[-1].end  # the last SEP is left off: the open one may grow
        buf = np.full(max(4096, 2 * (n + SLACK)), SEP, dtype=np.int32)
        buf[1:n] = np.concatenate(parts)[: n - 1]
        self.buf, self.n = buf, n
        self.index = _reindex(buf[:n])
        self.rebuilds += 1

    # ------------------------------------------------------------------ reading
    def count(self, pattern: Sequence[int]) -> int:
        """Occurrences of `pattern` (two tokens or more) in the stored documents: the
        count of its trie node (tests; the walk reads the same numbers)."""
        if len(pattern) < 2:
            raise ValueError("the index is over token pairs: a pattern has >= 2 tokens")
        pos = self.index.get(_key(pattern[-2], pattern[-1]), [])
        cand = np.asarray(pos, dtype=np.int64)
        return int((self._match_lengths(cand, pattern, len(pattern)) == len(pattern)).sum())

    def longest_match(self, context: Sequence[int], depth: int) -> tuple[int, np.ndarray]:
        """The longest suffix of `context` (at most `depth` tokens) that occurred before, and the
        positions where those occurrences end; (0, []) for none."""
        cand, m = self._candidates(context, depth)
        if not len(cand):
            return 0, cand
        best = int(m.max())
        return best, cand[m == best]

    def _candidates(self, context: Sequence[int], depth: int) -> tuple[np.ndarray, np.ndarray]:
        """The newest occurrences of the context's last pair (the open history's own end left
        out), and how many tokens of the context each one matches (2..depth)."""
        if len(context) < 2:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        pos = self.index.get(_key(context[-2], context[-1]))
        if not pos:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        cand = np.asarray(pos[-self.candidates:], dtype=np.int64)
        if self.open is not None and cand[-1] == self.n - 1:  # the open history's own end (the
            cand = cand[:-1]  # context after a sync): not an earlier occurrence. Positions ascend
        return cand, self._match_lengths(cand, context, depth)

    def _match_lengths(self, cand: np.ndarray, context: Sequence[int], depth: int) -> np.ndarray:
        D = min(depth, len(context))
        q = np.asarray(context[len(context) - D:], dtype=np.int32)[::-1]
        offs = cand[:, None] - np.arange(D)
        np.maximum(offs, 0, out=offs)  # buf[0] is SEP: stops every comparison
        eq = self.buf[offs] == q
        return np.where(eq.all(axis=1), D, eq.argmin(axis=1))

    def speculate(self, context: Sequence[int], L: int, depth: int = 24, min_prob: float = 0.1,
                  factor: float = 1.0) -> SuffixDraft:
        """The best continuation of the context: for each matched suffix length (longest
        first), the frequency-greedy walk down from its node, at most min(L, factor x match)
        tokens, each kept while its chance stays >= min_prob; the walk with the highest score
        (expected right tokens) wins, ties to the longer match (as SuffixDecoding)."""
        best = SuffixDraft()
        cand, m = self._candidates(context, depth)
        if not len(cand):
            return best
        L = min(L, SLACK - 1)
        levels = sorted(set(m.tolist()), reverse=True)
        for walks, match in enumerate(levels):
            cap = min(L, int(factor * match + 1e-6))
            if cap <= best.score or walks >= MAX_WALKS:  # no shorter match can do better
                break
            toks, probs = self._walk(cand[m >= match], cap, min_prob)
            score = float(sum(probs))
            if score > best.score:
                best = SuffixDraft(toks, probs, match, score)
        return best

    def _walk(self, occ: np.ndarray, cap: int, min_prob: float) -> tuple[list[int], list[float]]:
        """Down from the node whose occurrences end at `occ`: the most frequent next token
        (ties to the newest occurrence), its chance multiplied by child / parent count (an
        occurrence whose document ended there counts in the parent, not in any child)."""
        buf = self.buf
        ahead = buf[occ[:, None] + np.arange(1, cap + 1)]  # (occurrences, cap) next tokens
        toks: list[int] = []
        probs: list[float] = []
        prob = 1.0
        rows = ahead
        for j in range(cap):
            col = rows[:, j]
            if len(col) == 1 or (col == col[0]).all():  # one continuation: count ratio 1
                t = int(col[0])
                if t == SEP:
                    break
            else:
                t, c = _most_frequent(col)
                if t == SEP:
                    break
                prob *= c / len(col)
                if prob < min_prob:
                    break
                rows = rows[col == t]
            toks.append(t)
            probs.append(prob)
        return toks, probs

    @property
    def n_docs(self) -> int:
        return len(self.docs)


def _most_frequent(col: np.ndarray) -> tuple[int, int]:
    """The most frequent token of `col` (SEP, an ended document, never wins) and its count;
    ties go to the newest occurrence (the last in `col`: positions ascend)."""
    items = col.tolist()
    counts = Counter(t for t in items if t != SEP)
    if not counts:
        return SEP, 0
    top = max(counts.values())
    for t in reversed(items):
        if counts.get(t) == top:
            return t, top
    raise AssertionError("unreachable")


def _shared_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two histories (numpy: they can be long)."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def _reindex(buf: np.ndarray) -> dict[int, list[int]]:
    """The pair -> positions index of a whole array at once (after an eviction)."""
    a, b = buf[:-1].astype(np.int64), buf[1:].astype(np.int64)
    ok = (a != SEP) & (b != SEP)
    pos = np.flatnonzero(ok) + 1
    keys = a[ok] * MIX + b[ok]
    order = np.argsort(keys, kind="stable")  # positions stay ascending within a key
    keys, plist = keys[order], pos[order].tolist()
    cuts = [0, *(np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist(), len(plist)]
    heads = keys[cuts[:-1]].tolist() if len(keys) else []
    return {k: plist[s:e] for k, s, e in zip(heads, cuts[:-1], cuts[1:], strict=True)}


class Continuations(Protocol):
    """What the proposer reads: a SuffixStore, or a pool slot's pair (decode/drafters/suffix_shared.py)."""

    def sync(self, history: Sequence[int]) -> None: ...

    def speculate(self, context: Sequence[int], L: int, depth: int = ..., min_prob: float = ...,
                  factor: float = ...) -> SuffixDraft: ...


class SuffixDrafter(DrafterBase):
    """The `suffix` drafter: K = 1 point-mass drafts from the session's SuffixStore.

    `propose` returns None when nothing matches, `matched` is the matched suffix length
    (auto's gate prices by it). The store outlives the drafter (it is the session's): every
    propose first syncs the turn's history into it, so this turn's answer is findable in the
    next turn and request.
    """

    name = "suffix"
    kind = LOOKUP

    def __init__(self, store: Continuations, depth: int = 24, min_prob: float = 0.1, factor: float = 1.0) -> None:
        self.store = store
        self.depth, self.min_prob, self.factor = depth, min_prob, factor
        self.matched = 0
        self._last: tuple[int, int, int, SuffixDraft] | None = None  # (length, last token, L, draft)

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        committed, L = req.committed, req.L
        last = self._last
        if last is not None and last[0] == len(committed) and last[1] == committed[-1] and L <= last[2]:
            d = last[3]  # auto asked again for the same history, with the length its gate chose
        else:
            self.store.sync(committed)
            d = self.store.speculate(committed, L, self.depth, self.min_prob, self.factor)
            self._last = (len(committed), committed[-1], L, d)
        self.matched = self.run = d.match
        if not d.tokens:
            return None
        n = min(L, len(d.tokens), len(d.probs))
        return chain_trie(d.tokens[:n], self.name, d.probs[:n])

    def accept(self, trie: DraftTrie, d: Decision) -> None:
        """Nothing to keep: the next proposal syncs the grown history into the store."""
        self._last = None


def build(turn: Any, auto: CostModel | None = None) -> SuffixDrafter:
    """The registry's builder: the session's store (the runtime gives a suffix turn one;
    `turn` is a decode/turn.Turn, not imported: Turn holds the store, so that would circle)."""
    assert turn.suffix is not None, "the runtime gives a suffix turn the session's store"
    cfg = turn.cfg
    return SuffixDrafter(turn.suffix, cfg.suffix_depth, cfg.suffix_min_prob, cfg.suffix_factor)
