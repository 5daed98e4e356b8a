"""What a context's main sequence (seq 0) holds, and tokens committed but not yet evaluated.

Invariant: `tokens` are exactly the tokens whose KV is in seq 0 at positions 0..len-1, and
`pending` are committed tokens the next decode must evaluate first (the last committed token,
plus the last accepted draft token when the draft model never evaluated it). Keeping this
explicit is what lets every loop avoid re-evaluating accepted tokens.

KVState keeps the invariant itself: loops never touch `tokens`, `pending` or the sequence
ops of the main sequence. After a decode that evaluated `pending` they call `advance(next)`
(plain decoding) or `commit(accepted, next, seq=...)` (a verifier's or a judge's decision).

The invariant holds on every memory kind (backend/memory.py), each by its own means:

- attention: drafts live on sequences 1..K beside the main one (a shared-prefix trie); a
  commit makes the accepted span's cells part of the main sequence, the rest is dropped.
- sliding window: the same, and a prefix reused across turns is checked against the window
  (cells that fell out of it may have been reused): when it is gone, it is re-evaluated.
- recurrent / hybrid: one draft block at a time, on its `lane` (see `lane`): the main
  sequence itself when llama.cpp keeps enough state snapshots to roll the block back, else a
  branch sequence (a whole-state copy) that the main sequence adopts when every token it
  evaluated was accepted; otherwise the accepted tokens become pending and are evaluated
  again (the price of a memory that cannot roll back). A prefix is never cut: a diverged
  history is re-evaluated from the start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from localspec.backend import Context
from localspec.backend.memory import Memory
from localspec.errors import ContextFullError, DecodeAborted, SeqOpError
from localspec.stopflag import StopFlag

MAIN = 0  # main sequence id; drafts / PARSE cuts use 1..n_seq_max-1
SCORE_CHUNK = 64  # prompt positions per decode when every position's logits are read (sync's on_rows)
# prompt tokens per decode while a stop flag may end the evaluation: a superseded editor
# request, a client gone or Ctrl-C stops at the next chunk. 512 Q4 tokens take ~5.4 s on 2
# cores, 128 ~1.4 s, at 2 % less prompt throughput (93 vs 95 tok/s: docs/performance.md#fim)
STOP_CHUNK = 128
# a prefetch (a guessed next prompt evaluated while the editor is idle: server/fim_prefetch.py)
# that cannot be aborted inside a decode (a pool's slot: its decodes join other slots' rounds)
# stops between chunks of 32 tokens (~0.45 s on 2 cores), at ~25 % less throughput than 128
PREFETCH_CHUNK = 32
BRANCH = 1  # the one draft sequence of a recurrent / hybrid model that cannot roll back


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class KVState:
    """Bookkeeping of one context's main sequence."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.memory: Memory = getattr(ctx, "memory", Memory.ATTENTION)
        self.tokens: list[int] = []
        self.pending: list[int] = []
        self.reevaluated = 0  # accepted tokens evaluated again (memories that cannot roll back)
        # leading tokens whose KV a prompt-scoring pass (sync's on_rows) computed, in chunks
        # aligned to SCORE_CHUNK positions: a later scoring that reuses them gets the numbers
        # a fresh one would (llama.cpp's results depend on a batch's shape: ~0.1 nat apart)
        self.scored = 0

    @property
    def n_past(self) -> int:
        """Position of the first pending token."""
        return len(self.tokens)

    @property
    def committed(self) -> list[int]:
        return self.tokens + self.pending

    def sync(self, target: list[int], stop: StopFlag | None = None, *, reuse: int | None = None,
             on_rows: Callable[[np.ndarray, int], None] | None = None, chunk: int = STOP_CHUNK) -> int:
        """Make seq 0 hold target[:-1] with target[-1] pending, reusing the cached prefix.

        Returns the number of tokens evaluated (0 when the prefix was already cached): the
        second turn of a chat only evaluates its own new tokens. A raised `stop` ends the
        evaluation between two batches (an editor's superseded completion must not spend
        seconds on a prompt nobody waits for): the cache keeps the prefix evaluated so far
        (a valid prefix, reused by the next request that shares it) and nothing is pending.

        Scoring a prompt (decode/prompt_scores.py): `on_rows(logits, pos)` gets the logits
        of every evaluated position, chunk by chunk (row i is position pos + i), and at most
        `reuse` cached tokens are kept, so that the positions whose logits the caller lacks
        are evaluated again (the cache keeps the same tokens: prefix reuse is unchanged).
        `chunk`: tokens per decode while `stop` may end the evaluation.
        """
        if not target:
            raise ValueError("empty prompt")
        if len(target) >= self.ctx.n_ctx:
            raise ContextFullError(
                f"the prompt has {len(target)} tokens but the context holds {self.ctx.n_ctx}: "
                "shorten it, start a new conversation, or raise --ctx"
            )
        keep = common_prefix(self.tokens, target[:-1])
        if reuse is not None:
            keep = min(keep, reuse)
        self.drop_drafts()
        if keep < len(self.tokens):
            self._cut(keep)
        todo = target[len(self.tokens):-1]
        if on_rows is not None:
            self.pending = [target[-1]]
            return self._sync_scored(todo, on_rows)
        n_batch = self.ctx.n_batch if stop is None else min(self.ctx.n_batch, chunk)
        for start in range(0, len(todo), n_batch):
            if stop is not None and stop.is_set():
                self.pending = []
                return start
            chunk = todo[start : start + n_batch]
            b = self.ctx.batch.clear()
            b.add_sequence(chunk, len(self.tokens), MAIN, logits_last=False)
            try:
                self.ctx.decode()
            except DecodeAborted:  # (Context.abortable) the ubatches before the stopped one remain
                kept = chunk[: self.ctx.pos_max(MAIN) + 1 - len(self.tokens)]
                self.tokens.extend(kept)
                self.pending = []
                return start + len(kept)
            self.tokens.extend(chunk)
        self.pending = [target[-1]]
        return len(todo)

    def prefetch(self, target: list[int], stop: StopFlag) -> int:
        """`sync` for a prompt nobody waits for yet (a guessed next request: the next turn
        reuses what its prompt shares of it) that `stop` ends at once: inside a decode where
        llama.cpp can drop the stopped ubatch (attention cells; a real context, not a pool's
        slot, whose decodes join the other slots' rounds), else between PREFETCH_CHUNKs.
        Exact either way: the cache holds real evaluations of real tokens."""
        abortable = None if self.memory.has_state else self.ctx.abortable  # (None on a pool's SlotContext)
        if abortable is None:
            return self.sync(target, stop, chunk=PREFETCH_CHUNK)
        with abortable() as trip:
            remove = stop.on_set(trip)
            try:
                return self.sync(target, stop, chunk=self.ctx.n_batch)
            finally:
                remove()

    def _sync_scored(self, todo: list[int], on_rows: Callable[[np.ndarray, int], None]) -> int:
        """Evaluate `todo` after the main sequence with logits at every position, in chunks
        that end on multiples of SCORE_CHUNK (the same shapes whatever was cached before):
        llama.cpp's output buffer grows to the largest chunk's rows x the vocabulary (512
        rows of Qwen's 152k are 300 MB), so the chunks are small."""
        aligned = self.scored == len(self.tokens)  # everything before was scored like this too
        step = min(self.ctx.n_batch, SCORE_CHUNK)
        i = 0
        while i < len(todo):
            pos = len(self.tokens)
            chunk = todo[i : i + step - pos % step]
            b = self.ctx.batch.clear()
            for j, t in enumerate(chunk):
                b.add(t, pos + j, MAIN, True)
            self.ctx.decode()
            on_rows(self.ctx.logits_all(), pos)
            self.tokens.extend(chunk)
            i += len(chunk)
        if aligned:
            self.scored = len(self.tokens)
        return len(todo)

    def sync_to(self, committed: list[int]) -> None:
        """Catch up with tokens committed elsewhere (the draft follows the target).

        Tokens not yet evaluated become pending, so the next decode evaluates them together
        with its own work; a diverged history is cut back to the common prefix first.
        """
        if self.tokens + self.pending == committed:
            return
        keep = common_prefix(self.tokens, committed[:-1])
        if keep < len(self.tokens):
            self._cut(keep)
            keep = len(self.tokens)
        if len(committed) - keep > self.ctx.n_batch // 2:
            self.sync(committed)
        else:
            self.pending = committed[keep:]

    def _cut(self, keep: int) -> None:
        """Make the main sequence hold tokens[:keep] (or less: what its memory can keep).

        A recurrent state cannot lose a span (its snapshots serve only the latest decode,
        and an older rollback would be accepted yet wrong): it restarts from nothing. A
        sliding window keeps the cut only if the window before `keep` is still in cache."""
        if self.memory.has_state:
            keep = 0
        self.ctx.seq_rm(MAIN, keep, -1)
        if keep and self.memory is Memory.SLIDING_WINDOW and self.ctx.pos_min(MAIN) > max(0, keep - self.ctx.model.n_swa):
            keep = 0  # the window's cells were reused: evaluate the prefix again
            self.ctx.seq_rm(MAIN, 0, -1)
        del self.tokens[keep:]
        self.scored = min(self.scored, keep)

    def describe(self) -> str:
        """The memory kind and what it allows (--explain, the TUI)."""
        snaps = f", {self.ctx.n_rs_seq} state snapshots" if self.memory.has_state else ""
        return f"{self.memory.value}{snaps} ({self.memory.allows()})"

    @property
    def drafts_per_pass(self) -> int:
        """How many drafts one verification may carry on this memory: one on a recurrent
        state (it cannot be shared by a draft tree), else one per sequence besides MAIN.
        Callers ask this instead of testing the memory kind (decode/plan.fit_memory, auto's
        stacks)."""
        return 1 if self.memory.has_state else self.ctx.n_seq_max - 1

    def rollback(self, L: int, *, one_decode: bool = True) -> str:
        """How a rejected tail of an L-token block is undone here: "cells" (attention KV:
        seq_rm of the span), "snapshot" (a recurrent state rolled back in place, one decode
        within llama.cpp's snapshots) or "branch" (a whole-state copy, adopted only when
        every token was kept: docs/memory.md)."""
        if not self.memory.has_state:
            return "cells"
        return "snapshot" if self.lane(1, L, one_decode=one_decode) == MAIN else "branch"

    def lane(self, K: int, L: int, *, one_decode: bool = True) -> int | None:
        """Where a block of K drafts of up to L tokens is evaluated on this memory.

        None: the shared-prefix trie (draft k on sequence k + 1, the pending tokens on all).
        On a recurrent state, one draft: MAIN when the block is one decode and llama.cpp
        keeps a snapshot for each of its L tokens (a rejected tail is rolled back in place);
        else BRANCH, a whole-state copy the main sequence adopts only when every token it
        evaluated was kept (a draft model drafts over several decodes: always BRANCH)."""
        if not self.memory.has_state:
            return None
        if K != 1:
            raise ValueError(f"{self.ctx.model.name} keeps a recurrent state: one draft at a time")
        return MAIN if one_decode and self.ctx.n_rs_seq >= L else BRANCH

    def absorb_pending(self) -> None:
        """The last decode evaluated `pending` on the main sequence alone (a recurrent draft's
        first step, a catch-up): they are part of it now, nothing is pending."""
        self.tokens.extend(self.pending)
        self.pending = []

    def catch_up(self) -> int:
        """Evaluate all pending tokens but the last on the main sequence (one decode), so a
        branch starts from the newest state; returns how many were evaluated.

        Needed after a recurrent state could not adopt a partly accepted branch: without it
        the pending tokens would be evaluated again on every branch until one is kept."""
        todo = self.pending[:-1]
        if todo:
            self.ctx.batch.clear().add_sequence(todo, self.n_past, MAIN, logits_last=False)
            self.ctx.decode()
            self.tokens.extend(todo)
            self.pending = self.pending[-1:]
        return len(todo)

    def advance(self, next_token: int) -> None:
        """The last decode evaluated `pending` on the main sequence; `next_token` is pending now."""
        self.tokens.extend(self.pending)
        self.pending = [next_token]

    def commit(
        self, accepted: Sequence[int], next_token: int, *, seq: int = MAIN, evaluated: int | None = None
    ) -> None:
        """Bring the main sequence to pending + accepted, with `next_token` pending.

        The last decode evaluated `pending` and then the accepted tokens at the positions
        right after it, on sequence `seq`: a draft's sequence (its cells join the main one,
        no data copy) or MAIN itself (PARSE's answer; whatever lies past the accepted part
        is dropped). `evaluated` says how many of the accepted tokens that decode actually
        covered (the draft model never evaluates the last token of a draft): the others
        become pending ahead of `next_token`, so nothing is evaluated twice and nothing is
        skipped. Every other sequence is dropped.
        """
        n = len(accepted) if evaluated is None else evaluated
        base = self.n_past + len(self.pending)
        if seq == MAIN:
            self.ctx.seq_rm(MAIN, base + n, -1)  # a recurrent state: rolled back by snapshot
        elif self.memory.has_state:
            if self.ctx.pos_max(seq) != base + n - 1:
                # the branch's state is past what was kept and cannot be cut back: the main
                # state stays where it is (a recurrent draft's pending tokens were evaluated
                # on it first, a target's were not); what it lacks is evaluated next time
                self.drop_drafts()
                history = [*self.tokens, *self.pending, *accepted]
                have = self.ctx.pos_max(MAIN) + 1
                if not len(self.tokens) <= have <= base:
                    raise SeqOpError(f"{self.ctx.model.name}: the main state holds {have} positions, "
                                     f"expected {len(self.tokens)}..{base}")
                self.reevaluated += len(history) - have
                self.tokens, self.pending = history[:have], [*history[have:], next_token]
                return
            self.ctx.seq_cp(seq, MAIN, 0, -1)  # adopt the branch whole (state and cells)
        elif n:
            self.ctx.seq_cp(seq, MAIN, base, base + n)
        self.drop_drafts()
        self.tokens.extend(self.pending)
        self.tokens.extend(accepted[:n])
        self.pending = [*accepted[n:], next_token]

    def drop_drafts(self) -> None:
        """Forget every non-main sequence (rejected drafts, PARSE copies)."""
        for seq in range(1, self.ctx.n_seq_max):
            self.ctx.seq_rm(seq, 0, -1)

    def share_main(self, seqs: range | list[int]) -> None:
        """Let sequences see the main history (cells gain the ids; no data copy)."""
        for seq in seqs:
            self.ctx.seq_cp(MAIN, seq, 0, -1)

    def repair(self) -> None:
        """After an interruption: drop drafts and anything past the recorded tokens.

        A recurrent state ahead of `tokens` is dropped whole (the next turn evaluates its
        prompt again): rolling back a whole last decode is accepted by llama.cpp yet leaves
        a wrong state, and which decode was last is not known here."""
        self.drop_drafts()
        if not self.memory.has_state:
            self.ctx.seq_rm(MAIN, len(self.tokens), -1)
        elif self.ctx.pos_max(MAIN) >= len(self.tokens):
            self.ctx.seq_rm(MAIN, 0, -1)
            self.tokens, self.pending, self.scored = [], [], 0

    def reset(self) -> None:
        self.ctx.clear()
        self.tokens = []
        self.pending = []
        self.scored = 0
