"""What a context's main sequence (seq 0) holds, and tokens committed but not yet evaluated.

Invariant: `tokens` are exactly the tokens whose KV is in seq 0 at positions 0..len-1, and
`pending` are committed tokens the next decode must evaluate first (the last committed token,
plus the last accepted draft token when the draft model never evaluated it). Keeping this
explicit is what lets every loop avoid re-evaluating accepted tokens.

KVState keeps the invariant itself: loops never touch `tokens`, `pending` or the sequence
ops of the main sequence. After a decode that evaluated `pending` they call `advance(next)`
(plain decoding) or `commit(accepted, next, seq=...)` (a verifier's or a judge's decision).
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.backend import Context
from localspec.errors import ContextFullError

MAIN = 0  # main sequence id; drafts / PARSE cuts use 1..n_seq_max-1


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
        self.tokens: list[int] = []
        self.pending: list[int] = []

    @property
    def n_past(self) -> int:
        """Position of the first pending token."""
        return len(self.tokens)

    @property
    def committed(self) -> list[int]:
        return self.tokens + self.pending

    def sync(self, target: list[int]) -> int:
        """Make seq 0 hold target[:-1] with target[-1] pending, reusing the cached prefix.

        Returns the number of tokens evaluated (0 when the prefix was already cached): the
        second turn of a chat only evaluates its own new tokens.
        """
        if not target:
            raise ValueError("empty prompt")
        if len(target) >= self.ctx.n_ctx:
            raise ContextFullError(
                f"the prompt has {len(target)} tokens but the context holds {self.ctx.n_ctx}: "
                "shorten it, start a new conversation, or raise --ctx"
            )
        keep = common_prefix(self.tokens, target[:-1])
        self.drop_drafts()
        if keep < len(self.tokens):
            self.ctx.seq_rm(MAIN, keep, -1)
            del self.tokens[keep:]
        todo = target[keep:-1]
        n_batch = self.ctx.n_batch
        for start in range(0, len(todo), n_batch):
            chunk = todo[start : start + n_batch]
            b = self.ctx.batch.clear()
            b.add_sequence(chunk, len(self.tokens), MAIN, logits_last=False)
            self.ctx.decode()
            self.tokens.extend(chunk)
        self.pending = [target[-1]]
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
            self.ctx.seq_rm(MAIN, keep, -1)
            del self.tokens[keep:]
        if len(committed) - keep > self.ctx.n_batch // 2:
            self.sync(committed)
        else:
            self.pending = committed[keep:]

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
            self.ctx.seq_rm(MAIN, base + n, -1)
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
        """After an interruption: drop drafts and anything past the recorded tokens."""
        self.drop_drafts()
        self.ctx.seq_rm(MAIN, len(self.tokens), -1)

    def reset(self) -> None:
        self.ctx.clear()
        self.tokens = []
        self.pending = []
