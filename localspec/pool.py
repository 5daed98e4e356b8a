"""A pool of N slot sessions over one pair of models: what `serve -np N` runs.

Each slot is an ordinary RuntimeSession (its own conversation, prefix cache, stop flag,
method choice) whose contexts are SlotContexts (backend/slots.py) over the pool's two real
contexts, so their decodes are joined into one llama_decode per context and round. The
pool's `base` session owns the real contexts: the server renders, tokenizes and reads
metadata through it, and the cost model is timed on it (a full context, nothing else
running) before the slots serve; the slots share its cost model, and the suffix proposer's
store of finished generations (decode/drafters/suffix_shared.py: a request can be drafted from an
answer another slot wrote).

Sizes follow llama-server's -np: --ctx and --batch are totals split evenly across the
slots; every slot gets --drafts' sequences (n_seq_max) of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from localspec.backend.slots import Rounds, SlotContext
from localspec.costmodel.inround import InRound
from localspec.decode.drafters.suffix_shared import SharedSuffix
from localspec.decode.state import KVState
from localspec.errors import ConfigError
from localspec.loading import open_session
from localspec.runtime import RuntimeSession
from localspec.session import ProgressFn, SessionOptions

MAX_SLOTS = 16  # n_slots x n_seq_max must stay within llama.cpp's 256 sequences


def pool_options(options: SessionOptions, n_slots: int) -> SessionOptions:
    """The real contexts' sizes: --ctx and --batch as given (totals), a slot's sequences times N."""
    # no head for a pool's auto: its context follows one history (the base's), not the slots'
    mtp = False if options.mtp is None and n_slots > 1 else options.mtp
    return replace(options, n_seq_max=options.n_seq_max * n_slots, mtp=mtp, n_slots=n_slots)


def slot_options(total: SessionOptions, n_slots: int) -> SessionOptions:
    """What one slot of contexts sized `total` gets: an even share of positions, batch and
    sequences (also what the flags are checked against before loading)."""
    return replace(total, n_ctx=total.n_ctx // n_slots if total.n_ctx else 0,
                   n_batch=total.n_batch // n_slots, n_seq_max=total.n_seq_max // n_slots, n_slots=1)


class Pool:
    """`base` (the real contexts) and `slots` (sessions whose decodes share rounds)."""

    def __init__(self, base: RuntimeSession, n_slots: int) -> None:
        self.base = base
        self.rounds = Rounds()
        per = slot_options(base.options, n_slots)
        self.slots: list[RuntimeSession] = []
        self.suffix = SharedSuffix()  # every slot's finished histories (for --spec-type suffix)
        for i in range(n_slots):
            t = KVState(SlotContext(base.target.ctx, self.rounds, i, n_slots))  # type: ignore[arg-type]
            d = (KVState(SlotContext(base.draft.ctx, self.rounds, i, n_slots, priority=1))  # type: ignore[arg-type]
                 if base.draft else None)
            self.slots.append(RuntimeSession(base.target_model, base.draft_model, per, base.target_name,
                                             base.draft_name, states=(t, d)))
            self.slots[-1].shared_suffix = self.suffix
        self.share_costs()

    def share_costs(self) -> None:
        """Hand the base session's cost model (timed on the full contexts) to every slot,
        each seeing the curves through InRound: a slot's block is priced by what it adds
        to the round the other slots fill (acceptance, healing and the cache stay shared)."""
        cm = self.base.costs
        for i, s in enumerate(self.slots):
            if cm is None:  # never timed inside a round (other slots' tokens would be in it)
                s.costs = None
                s.never_time("with -np the cost model is timed at start-up (--method auto)")
                continue
            s.never_time(None)
            t, d = s.target.ctx, s.draft.ctx if s.draft else None
            s.costs = replace(cm, target=InRound(cm.target, lambda i=i, c=t.real: self.rounds.others(i, c)),
                              draft=cm.draft if d is None else
                              InRound(cm.draft, lambda i=i, c=d.real: self.rounds.others(i, c)))

    def forget_lookups(self) -> None:
        """Empty every suffix store, the shared one too (benchmarks, between methods)."""
        self.suffix.clear()
        for s in self.slots:
            s.forget_lookups()

    @contextmanager
    def active(self, slot: int) -> Iterator[None]:
        """Wrap a slot's whole generation (start, iteration, close) in this."""
        with self.rounds.active(slot):
            yield

    def close(self) -> None:
        self.base.close()


def open_pool(target: str, draft: str | None, options: SessionOptions, n_slots: int,
              progress: ProgressFn | None = None) -> Pool:
    """Load the pair once, with contexts sized for n_slots slots."""
    if not 1 <= n_slots <= MAX_SLOTS:
        raise ConfigError(f"-np/--parallel must be in 1..{MAX_SLOTS} (got {n_slots})")
    if n_slots * options.n_seq_max > 256:
        raise ConfigError(f"-np {n_slots} x {options.n_seq_max} sequences per slot exceeds llama.cpp's 256")
    if options.mtp and n_slots > 1:  # its context follows one history: the base context's main sequence
        raise ConfigError("--spec-type mtp runs with one slot (-np 1): the MTP head follows one history")
    base = open_session(target, draft, pool_options(options, n_slots), progress)
    try:
        return Pool(base, n_slots)
    except Exception:
        base.close()
        raise
