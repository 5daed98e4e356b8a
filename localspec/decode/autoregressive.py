"""Plain decoding with the target: the baseline every method is measured against.

`target_step` is the one place the target writes a token by itself; AR, auto's AR phases
and PARSE's regeneration all call it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from localspec.decode.logprobs import row_logprob
from localspec.decode.state import MAIN
from localspec.decode.turn import Turn
from localspec.events import Event, Written
from localspec.sampling import sample_row, transform_row


def target_step(turn: Turn) -> Written | None:
    """Evaluate the pending token(s), sample the next one, emit it. None when the context is full."""
    tgt = turn.target
    ctx = tgt.ctx
    stats = turn.stats
    if not turn.room(len(tgt.pending)):
        return None
    t0 = time.perf_counter()
    row = ctx.batch.clear().add_sequence(tgt.pending, tgt.n_past, MAIN, True)
    ctx.decode()
    t1 = time.perf_counter()
    logits = ctx.logits(row)
    con = turn.constraint
    dist = transform_row(logits, turn.cfg.sampling) if con is None else con.row(logits, turn.cfg.sampling)
    tok = sample_row(dist, turn.rng)
    tgt.advance(tok)
    if con is not None:
        con.commit([tok])
    taken, text = turn.emitter.push([tok])
    n_top = turn.cfg.logprobs
    lps = (row_logprob(turn.target_model, logits, tok, n_top),) if n_top is not None and taken else ()
    stats.target_calls += 1
    stats.verify_seconds += t1 - t0
    stats.overhead_seconds += time.perf_counter() - t1
    return Written((tok,), text, "target", lps)


def ar_step(turn: Turn) -> list[Event] | None:
    """One AR iteration (a target step counted as an iteration)."""
    ev = target_step(turn)
    if ev is None:
        return None
    turn.stats.iterations += 1
    return [ev]


def ar_loop(turn: Turn) -> Iterator[Event]:
    """One target decode per token."""
    turn.stats.ran = "ar"
    while not turn.should_stop():
        events = ar_step(turn)
        if events is None:
            turn.emitter.close("context_full")
            return
        yield from events
        yield turn.tick()
