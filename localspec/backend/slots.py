"""Slots: N views of one llama.cpp context whose decodes are joined into ONE llama_decode.

Why: `serve -np N` runs N requests at once. Each request's decoding loop is the ordinary one
(decode/), written against a Context; here each slot gets a SlotContext that looks like a
whole context (its own sequence ids, a share of the KV cells and of the batch) but whose
`decode()` only hands its tokens to `Rounds`. When every slot that is generating is waiting
in a decode, the round fires: per real context, the slots' tokens go into one batch, one
llama_decode runs, and each slot reads its own rows of the logits (a numpy view: rows are
sliced, not copied). So N target verifications cost one target pass, and N draft steps one
draft pass: the batch curve of a CPU/GPU is what makes that pay.

Invariants:
- slot i owns the real sequence ids [i*S, (i+1)*S) (S = its n_seq_max); every sequence
  operation is mapped there, so no slot can touch another's cells (seq_keep and clear act
  on the slot's own ids only);
- a slot gets n_ctx // N positions and n_batch // N tokens per decode, so a round always
  fits one llama_decode (llama-server splits -c across -np slots the same way);
- a round runs only while every active slot waits (then no slot reads logits or edits its
  cache), and `Rounds.active(i)` must wrap a slot's whole generation: KV edits before the
  first decode happen while the slot is counted active, so never during a running round;
- every KV operation of a slot (remove, copy, keep, position queries) holds the rounds'
  lock: llama.cpp's memory is not thread-safe, and two slots editing it at once (two
  requests starting together, or two speculating slots rolling back) corrupted its
  per-sequence maps -- an intermittent SIGSEGV in `serve -np` and `bench slots` runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from localspec.backend.context import Context
from localspec.errors import ConfigError, SeqOpError


class SlotBatch:
    """What one slot puts in the next round: (token, pos, seq_ids, logits) items, with the
    Batch interface the decoding loops use (row numbers are the slot's own)."""

    def __init__(self, capacity: int, n_seq_max: int) -> None:
        self.capacity = capacity
        self.n_seq_max = n_seq_max
        self.items: list[tuple[int, int, tuple[int, ...], bool]] = []
        self.n = 0
        self.n_outputs = 0

    def clear(self) -> SlotBatch:
        self.items.clear()
        self.n = self.n_outputs = 0
        return self

    def add(self, token: int, pos: int, seq_ids: Sequence[int] | int, logits: bool = False) -> int:
        if self.n >= self.capacity:
            raise ConfigError(f"batch of more than {self.capacity} tokens (this slot's share of --batch): "
                              "lower -K/-L or -np, or raise --batch")
        ids = (seq_ids,) if isinstance(seq_ids, int) else tuple(seq_ids)
        if not ids or max(ids) >= self.n_seq_max or min(ids) < 0:
            raise ConfigError(f"sequence ids {list(ids)} out of range for this slot's {self.n_seq_max}: lower -K")
        self.items.append((int(token), int(pos), ids, bool(logits)))
        self.n += 1
        if logits:
            self.n_outputs += 1
            return self.n_outputs - 1
        return -1

    def add_sequence(self, tokens: Iterable[int], pos0: int, seq_ids: Sequence[int] | int,
                     logits_last: bool = True) -> int:
        toks = list(tokens)
        row = -1
        for j, t in enumerate(toks):
            row = self.add(t, pos0 + j, seq_ids, logits_last and j == len(toks) - 1)
        return row


class Rounds:
    """The barrier: collects the active slots' decodes and runs them as one per context."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._active: set[int] = set()
        self._waiting: dict[int, SlotContext] = {}
        self.rounds = 0  # rounds fired (tests, /slots)
        self.decodes = 0  # llama_decode calls made for them
        self.tokens = 0  # tokens they evaluated
        # per (slot, real context): a running mean of the tokens the OTHER slots put in the
        # rounds this slot decoded in (what the cost model prices a slot's block on top of)
        self._others: dict[tuple[int, int], float] = {}

    def others(self, slot: int, real: object) -> float:
        """Tokens the other slots are expected to add to this slot's next decode on `real`
        (0 while it is the only active slot: nothing to share the round with)."""
        if len(self._active - {slot}) == 0:
            return 0.0
        return self._others.get((slot, id(real)), 0.0)

    @contextmanager
    def active(self, slot: int) -> Iterator[None]:
        """A slot's generation: its decodes take part in rounds until it leaves."""
        with self._cv:
            self._active.add(slot)
        try:
            yield
        finally:
            with self._cv:
                self._active.discard(slot)
                if self._waiting and self._active <= set(self._waiting):
                    self._fire()

    @property
    def lock(self) -> threading.Condition:
        """Held by every slot's KV operation and by every round: one llama.cpp call on the
        shared contexts at a time (reentrant: a KV op inside a locked section is fine)."""
        return self._cv

    @property
    def n_active(self) -> int:
        return len(self._active)

    def submit(self, sc: SlotContext) -> None:
        """Wait until the round with this slot's decode has run (or run it, as the last one in)."""
        with self._cv:
            sc.error = None
            sc.ran = False
            self._waiting[sc.index] = sc  # a slot is one thread: it waits on one decode at a time
            if self._active | {sc.index} <= set(self._waiting):
                self._fire()
            while not sc.ran:
                self._cv.wait()
        if sc.error is not None:
            raise sc.error

    def _fire(self) -> None:
        """Run the waiting decodes of ONE real context, the cheapest (lock held).

        Why one: slots drafting (L cheap draft steps) beside slots verifying (one costly
        target pass) would otherwise pay a target pass per draft step. Draft rounds go
        first, so the drafting slots run through their steps together while the verifying
        ones wait; once every slot waits on the target, one target round verifies them all:
        the slots fall into step, drafting together and verifying together."""
        groups: dict[int, list[SlotContext]] = {}
        for sc in self._waiting.values():
            groups.setdefault(id(sc.real), []).append(sc)
        scs = max(groups.values(), key=lambda g: g[0].priority)
        for sc in scs:
            del self._waiting[sc.index]
        self._decode(scs)
        for sc in scs:
            sc.ran = True
        self.rounds += 1
        self._cv.notify_all()

    def _decode(self, scs: list[SlotContext]) -> None:
        real = scs[0].real
        b = real.batch.clear()
        out = 0
        for sc in sorted(scs, key=lambda s: s.index):
            sc.row0 = out
            for token, pos, ids, logits in sc.pending.items:
                b.add(token, pos, [sc.base + i for i in ids], logits)
            out += sc.pending.n_outputs
            sc.n_out = sc.pending.n_outputs
        # a round of several slots is several sequences: it costs ~25 % more than one
        # sequence's batch of its size (measured: ~246 vs 198 ms for 12 tokens, F16 target),
        # and healing the shared curve from it would price a lone request's blocks (and
        # every later session's, through the cached curve) too high. A lone slot's rounds
        # still heal it.
        hook = real.on_decode
        if len(scs) > 1:
            real.on_decode = None
        try:
            real.decode(b)
            if b.n_outputs:
                # read the logits pointer now, under the lock: llama_get_logits may reorder
                # the output buffer, which slots reading at once from their threads would race
                real.logits_all()
        except Exception as e:  # noqa: BLE001 - every slot of the round hears about it
            for sc in scs:
                sc.error = e
            return
        finally:
            real.on_decode = hook
        self.decodes += 1
        self.tokens += b.n
        for sc in scs:
            sc.n_decodes += 1
            sc.n_evaluated += sc.pending.n
            key = (sc.index, id(real))
            self._others[key] = 0.7 * self._others.get(key, 0.0) + 0.3 * (b.n - sc.pending.n)


class SlotContext:
    """One slot's view of a shared Context (see the module docstring)."""

    # no Context.abortable: a slot's decode joins the other slots' in one round, which an
    # abort would end for all of them (KVState.prefetch then stops between chunks instead)
    abortable = None

    def __init__(self, real: Context, rounds: Rounds, index: int, n_slots: int, priority: int = 0) -> None:
        if real.n_seq_max // n_slots < 1:
            # a stateful model's context holds 2 sequences per slot (Context's n_slots)
            raise ConfigError(f"-np {n_slots}: {real.model.name}'s context holds {real.n_seq_max} "
                              f"sequences, fewer than one per slot; open it for {n_slots} slots")
        self.real = real
        self.rounds = rounds
        self.index = index
        self.priority = priority  # the round among those waiting that runs first (the draft's)
        self.ran = False
        self.n_seq_max = real.n_seq_max // n_slots
        self.base = index * self.n_seq_max
        self.n_ctx = real.n_ctx // n_slots
        self.n_batch = real.n_batch // n_slots
        self.model = real.model
        self.memory = real.memory
        # llama.cpp keeps its snapshots per sequence: a slot rolls its own main state back in
        # place, even when its tokens share a round (tests/test_slots.py: AR's text, 0 re-evaluated)
        self.n_rs_seq = real.n_rs_seq
        self.threads = real.threads
        self.n_vocab = real.n_vocab
        self.batch = SlotBatch(self.n_batch, self.n_seq_max)
        self.pending = self.batch
        self.n_decodes = 0
        self.n_evaluated = 0
        self.row0 = 0
        self.n_out = 0
        self.error: BaseException | None = None

    @property
    def placement_key(self) -> str:
        return self.real.placement_key

    @property
    def span(self) -> int:
        """The shared context's length after its last round (what attention costs there)."""
        return self.real.span

    @span.setter
    def span(self, value: int) -> None:
        self.real.span = value

    @property
    def on_decode(self):  # noqa: ANN201 - the shared context's hook (one cost model for all slots)
        return self.real.on_decode

    @on_decode.setter
    def on_decode(self, hook) -> None:  # noqa: ANN001
        self.real.on_decode = hook

    def decode(self, batch: SlotBatch | None = None) -> None:
        b = batch or self.batch
        if b.n == 0:
            return
        self.pending = b
        self.rounds.submit(self)

    def logits_all(self) -> np.ndarray:
        return self.real.logits_all()[self.row0 : self.row0 + self.n_out]

    def logits(self, row: int) -> np.ndarray:
        return self.logits_all()[row]

    # ------------------------------------------------------------------ KV ops, mapped
    def _own(self) -> range:
        return range(self.base, self.base + self.n_seq_max)

    def try_seq_rm(self, seq: int, p0: int = 0, p1: int = -1) -> bool:
        with self.rounds.lock:
            if seq < 0:
                return all([self.real.try_seq_rm(s, p0, p1) for s in self._own()])
            return self.real.try_seq_rm(self.base + seq, p0, p1)

    def seq_rm(self, seq: int, p0: int = 0, p1: int = -1) -> None:
        if not self.try_seq_rm(seq, p0, p1):
            raise SeqOpError(f"llama.cpp refused to remove positions {p0}.. of slot {self.index}'s sequence "
                             f"{seq} ({self.model.name}); this is a localspec bug: please report it")

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int = -1) -> None:
        with self.rounds.lock:
            self.real.seq_cp(self.base + src, self.base + dst, p0, p1)

    def seq_keep(self, seq: int) -> None:
        with self.rounds.lock:
            for s in self._own():
                if s != self.base + seq:
                    self.real.seq_rm(s)  # checked: a refusal raises SeqOpError

    def pos_max(self, seq: int = 0) -> int:
        with self.rounds.lock:
            return self.real.pos_max(self.base + seq)

    def pos_min(self, seq: int = 0) -> int:
        with self.rounds.lock:
            return self.real.pos_min(self.base + seq)

    def clear(self) -> None:
        self.seq_rm(-1)

    def close(self) -> None:
        """The shared context is closed by its owner (the pool), not by a slot."""
