"""`--method auto`: run whatever the cost model predicts fastest, re-checking as we go.

Starts from the cost model's choice; every few iterations the running acceptance estimate
updates the prediction, so a pair that stops agreeing (or a prompt where the draft is
useless) falls back to plain decoding, and AR probes speculation now and then in case the
text became easy again.
"""

from __future__ import annotations

from collections.abc import Iterator

from localspec.costmodel import CostModel, dynamic_length, length_cap, per_draft_length
from localspec.decode.autoregressive import ar_step
from localspec.decode.speculative import SpecSettings, draft_sampling, spec_iteration
from localspec.decode.turn import Turn
from localspec.events import Event
from localspec.verify import NumpyRNG

RECHECK_EVERY = 8  # speculative iterations between re-decisions
PROBE_EVERY = 32  # AR tokens between speculative probes (only if speculation could pay)
FIRST_PROBE = 4  # with little evidence about this pair, probe early


def _decide(cm: CostModel, turn: Turn) -> SpecSettings | None:
    best, ar = cm.choose(turn.cfg)
    if best is None:
        turn.stats.choice_note = f"ar (alpha={cm.acceptance.alpha:.2f}: nothing predicted above {ar:.1f} tok/s)"
        return None
    if not dynamic_length(turn.cfg, best):
        turn.stats.choice_note = (
            f"{best.method} K={best.K} L={best.L} (alpha={cm.acceptance.alpha:.2f}, predicted "
            f"{best.tok_per_s / ar:.2f}x AR)"
        )
        return SpecSettings(best.method, best.K, best.L)
    # dynamic length: L becomes a cap and the calibrated stop rule ends each draft where one
    # more token stops paying
    cap = length_cap(turn.cfg, best)
    per_draft = per_draft_length(turn.cfg, best)
    turn.stats.choice_note = (
        f"{best.method} K={best.K} L<={cap} dynamic{' per draft' if per_draft else ''} "
        f"(alpha={cm.acceptance.alpha:.2f}, predicted {best.tok_per_s / ar:.2f}x AR at L={best.L})"
    )
    return SpecSettings(best.method, best.K, cap, cm.draft_stop(best, per_draft), per_draft)


def auto_loop(turn: Turn) -> Iterator[Event]:
    cm: CostModel = turn.costs
    rng = NumpyRNG(turn.rng)
    dsampling = draft_sampling(turn.cfg)
    settings = _decide(cm, turn)
    turn.stats.ar_estimate = cm.ar()
    since = 0
    could_pay = cm.expected_tokens(1, 8, alpha=0.95) / cm.iteration_seconds(1, 8) > cm.ar()
    while not turn.should_stop():
        wait = FIRST_PROBE if cm.acceptance.trials < 16 else PROBE_EVERY
        probe = settings is None and could_pay and since >= wait
        if settings is not None or probe:
            st = settings or SpecSettings("sd" if turn.cfg.sampling.temp <= 0 else "gbv", 1, 4)
            events = spec_iteration(turn, st, rng, dsampling)
            if events is not None:
                assert turn.last_decision is not None
                tau, L, overhead = turn.last_decision
                cm.acceptance.update(tau, L, turn.last_confs)
                cm.overhead = 0.9 * cm.overhead + 0.1 * overhead
        else:
            events = ar_step(turn)
        if events is None:
            turn.emitter.close("context_full")
            return
        since += 1
        if (settings is not None and since >= RECHECK_EVERY) or probe:
            settings = _decide(cm, turn)
            since = 0
        yield from events
        yield turn.tick()
