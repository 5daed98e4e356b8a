"""The suffix proposer's cross-request store in `serve -np N`: one store every slot reads.

Why two stores per slot, not one: a SuffixStore keeps one *open* document that `sync`
extends as a history grows. N slots growing N histories into one store would close and
reopen each other's documents every iteration, storing the same tokens again each time
(and counting them twice). So each slot keeps its own store for the conversation it is
serving (synced every iteration, as in a one-slot session), and the pool keeps one
`SharedSuffix` of *finished* histories: a slot publishes its history when a generation
ends, and every slot's proposals also look there. The better of the two continuations
(SuffixDecoding's score, the expected number of right tokens) is drafted. This is what
SuffixDecoding / vLLM's `suffix` method does with its per-request tree and its global
tree of earlier outputs.

Slots run in threads: every read and write of the shared store holds its lock. A publish
appends only what the history adds to a recent document (SuffixStore.sync), so a long
conversation served turn by turn is stored once; the memory bound (--spec-suffix-max-tokens)
evicts the oldest documents, as in a one-slot session.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from localspec.decode.drafters.suffix import DEFAULT_MAX_TOKENS, SuffixDraft, SuffixStore


class SharedSuffix:
    """Finished histories of every slot of a pool, in one SuffixStore behind a lock."""

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self.store = SuffixStore(max_tokens)
        self._lock = threading.Lock()
        self.published = 0  # generations published (the /health figure)

    def publish(self, history: Sequence[int], max_tokens: int | None = None) -> None:
        """Store a finished generation's prompt and answer (what it shares with a recent
        document once); `max_tokens` follows the request's --spec-suffix-max-tokens."""
        with self._lock:
            if max_tokens is not None:
                self.store.max_tokens = max_tokens
            self.store.sync(history)
            self.published += 1

    def clear(self) -> None:
        """Forget everything published (benchmarks, between methods); the slots keep this object."""
        with self._lock:
            self.store = SuffixStore(self.store.max_tokens)
            self.published = 0

    def speculate(self, context: Sequence[int], L: int, depth: int, min_prob: float,
                  factor: float) -> SuffixDraft:
        with self._lock:
            return self.store.speculate(context, L, depth, min_prob, factor)

    def info(self) -> dict[str, int]:
        """What /health reports: tokens kept, documents, generations published."""
        with self._lock:
            return {"tokens": self.store.live, "documents": self.store.n_docs, "published": self.published}


class SlotSuffix:
    """A slot's view for the suffix proposer: its own store, plus the pool's shared one.

    Has the store methods the proposer and the runtime call (`sync`, `speculate`), so a
    turn holds either a SuffixStore or this; the runtime publishes to the shared store."""

    def __init__(self, own: SuffixStore, shared: SharedSuffix) -> None:
        self.own, self.shared = own, shared

    def sync(self, history: Sequence[int]) -> None:
        """The slot's own growing history (the shared store takes it when it is finished)."""
        self.own.sync(history)

    def speculate(self, context: Sequence[int], L: int, depth: int = 24, min_prob: float = 0.1,
                  factor: float = 1.0) -> SuffixDraft:
        """The better-scored continuation of the two stores (ties to the slot's own)."""
        mine = self.own.speculate(context, L, depth, min_prob, factor)
        if mine.score >= L - 1e-9:
            return mine  # a sure full-length draft (a score is at most L): nothing can score higher
        theirs = self.shared.speculate(context, L, depth, min_prob, factor)
        return theirs if theirs.score > mine.score else mine
