"""Plain decoding with the target: the baseline every method is measured against."""

from __future__ import annotations

import time
from collections.abc import Iterator

from localspec.decode.state import MAIN
from localspec.decode.turn import Turn
from localspec.events import Event, Written
from localspec.sampling import sample_row, transform_row


def ar_loop(turn: Turn) -> Iterator[Event]:
    """One target decode per token; the pending token is evaluated, the next one sampled."""
    tgt = turn.target
    ctx = tgt.ctx
    sampling = turn.cfg.sampling
    stats = turn.stats
    while not turn.should_stop():
        if not turn.room(len(tgt.pending)):
            turn.emitter.close("context_full")
            return
        t0 = time.perf_counter()
        row = ctx.batch.clear().add_sequence(tgt.pending, tgt.n_past, MAIN, True)
        ctx.decode()
        t1 = time.perf_counter()
        tgt.tokens.extend(tgt.pending)
        tok = sample_row(transform_row(ctx.logits(row), sampling), turn.rng)
        tgt.pending = [tok]
        _, text = turn.emitter.push([tok])
        stats.iterations += 1
        stats.target_calls += 1
        stats.verify_seconds += t1 - t0
        stats.overhead_seconds += time.perf_counter() - t1
        yield Written((tok,), text, "target")
        yield turn.tick()
