"""Cost model: measured batch costs on THIS machine -> predicted tok/s -> the method to run.

Speculation only pays when (draft cost + batched verify cost) per emitted token is below the
target's plain decode cost; on 2 cores with a cheap quantized target it often is not. So the
costs are measured (a first estimate in a few seconds per model file and placement, cached,
then healed from the timings generation sees anyway: curves.py; a session times it in the
background or before its first turn: session.py), acceptance is tracked while
generating (acceptance.py), and `auto` picks the fastest (method, K, L) -- or plain AR when
nothing beats it (predict.py). `explain()` prints the table behind the choice.

    curves.py      CostCurve, timing, the on-disk cache, live healing, quiet and contended prices
    contention.py  the ceiling a quiet machine puts on a small draft's price
    session.py     SessionCosts: one session's cost model, timed without blocking a reply
    gate.py        DecodeGate: a session's generations and its timing steps, never at once
    acceptance.py  Acceptance: the running rate and the per-confidence calibration
    priors.py      the acceptance priors a fresh session starts from (shipped data, fitted on tune halves)
    predict.py     CostModel, Prediction, CalibratedStop, the dynamic-length rules
    explain.py     the --explain table
"""

from __future__ import annotations

import time  # noqa: F401 - tests patch costmodel.time.perf_counter around measure()
from collections.abc import Callable, Generator

from localspec.backend import Context
from localspec.costmodel import contention, priors
from localspec.costmodel.acceptance import (
    BIN_MEMORY,
    BIN_PRIOR,
    MAX_MEMORY,
    N_BINS,
    PRIOR_ALPHA,
    Acceptance,
)
from localspec.costmodel.curves import (
    BATCH_SIZES,
    CURVE_VERSION,
    DEPTH,
    QUICK_SIZES,
    TIMED_HERE,
    CostCurve,
    cache_dir,
    curve_for,
    curve_key,
    load_curve,
    measure,
    measure_steps,
    save_curve,
    timing_steps,
)
from localspec.costmodel.explain import explain
from localspec.costmodel.predict import (
    DYNAMIC_MAX_L,
    MARGIN,
    CalibratedStop,
    CostModel,
    Prediction,
    dynamic_length,
    length_cap,
    per_draft_length,
)

__all__ = [
    "BATCH_SIZES", "BIN_MEMORY", "BIN_PRIOR", "CURVE_VERSION", "DYNAMIC_MAX_L", "MARGIN", "MAX_MEMORY",
    "N_BINS", "PRIOR_ALPHA", "QUICK_SIZES", "Acceptance", "CalibratedStop", "CostCurve", "CostModel",
    "Prediction", "cache_dir", "curve_for", "curve_key", "dynamic_length", "explain", "length_cap",
    "length_of", "load_curve", "measure", "measure_steps", "model_for", "per_draft_length", "save_curve", "timing_steps",
    "timing_plan",
]

Progress = tuple[str, int, int]  # (model name, sizes done, sizes in all)


def timing_plan(
    target: Context, draft: Context | None, cm: CostModel | None, recalibrate: bool = False
) -> list[Context]:
    """The contexts whose curves must be timed before `model_for` can answer: those with no
    curve (none in `cm`, none cached), every one with --recalibrate, and a small draft's
    curve timed dearer than its target's (timed on a busy machine: contention.py; once per
    process). A stale curve is not among them: it heals from live decodes, and a re-timing
    inside a turn is what made a busy server's requests wait seconds (curves.py)."""
    ctxs = [c for c in (target, draft) if c is not None]
    if recalibrate:
        return ctxs
    if cm is not None:
        return []
    cached = {id(c): load_curve(c) for c in ctxs}
    todo = [c for c in ctxs if cached[id(c)] is None]
    if (draft is not None and draft not in todo and curve_key(draft) not in TIMED_HERE
            and contention.implausible(target, draft, cached[id(target)], cached[id(draft)])):
        todo.append(draft)
    return todo


def model_steps(
    target: Context, draft: Context, greedy: bool = True, cm: CostModel | None = None, recalibrate: bool = False
) -> Generator[Progress, None, CostModel]:
    """model_for, yielding (model, done, total) while it times a missing curve (a frontend
    shows it)."""
    todo = timing_plan(target, draft, cm, recalibrate)
    timed: dict[int, CostCurve] = {}
    for ctx in todo:
        timed[id(ctx)] = yield from _timed(ctx, recalibrate)
    if cm is None or todo:
        t = timed.get(id(target)) or (cm.target if cm is not None else load_curve(target))
        d = timed.get(id(draft)) or (cm.draft if cm is not None else load_curve(draft))
        assert t is not None and d is not None
        if cm is None:
            cm = CostModel(t, d)
        else:
            cm.target, cm.draft = t, d
    # a small draft's price above its target's is contention, not the pair's (contention.py)
    contention.settle(target, draft, getattr(cm.target, "curve", cm.target), cm.draft)
    path = Acceptance.path(target, draft, greedy)
    if cm.acceptance_path != path:
        cm.acceptance = fresh_acceptance(target, draft, greedy)
        cm.acceptance.load(path)
        cm.acceptance_path = path
    # what the models' memories make a rejected draft cost (backend/memory.py)
    if getattr(target, "memory", None) is not None and target.memory.has_state:
        cm.target_rollback = target.n_rs_seq
    cm.draft_reevaluates = bool(getattr(draft, "memory", None) is not None and draft.memory.has_state)
    # every decode from now on is a free measurement that heals the curves
    target.on_decode, draft.on_decode = cm.target.observe, cm.draft.observe
    cm.target.where, cm.draft.where = length_of(target), length_of(draft)
    return cm


def length_of(ctx: Context) -> Callable[[], int] | None:
    """What a curve asks for the context length its prices are at (curves.DEPTH where the
    context does not say: a test's stand-in); None for a memory whose step costs the same
    at any length (a recurrent state): the curve then prices and heals no place."""
    memory = getattr(ctx, "memory", None)
    if memory is not None and not memory.attends:
        return None
    return lambda: getattr(ctx, "span", DEPTH)


def fresh_acceptance(target: Context, draft: Context, greedy: bool) -> Acceptance:
    """An acceptance estimate before this pair's first verification: the shipped prior of
    the pair (costmodel/priors.py) where there is one, else PRIOR_ALPHA."""
    names = target.model.path.name, draft.model.path.name
    alpha = priors.draft_alpha(*names, greedy)
    bins = priors.draft_bins(*names, greedy)
    if bins is not None and len(bins) != N_BINS:
        bins = None
    if alpha is None:
        return Acceptance(bin_prior=bins)
    return Acceptance(prior=alpha, prior_weight=priors.DRAFT_PRIOR_WEIGHT, bin_prior=bins)


def target_steps(
    target: Context, cm: CostModel | None = None, recalibrate: bool = False
) -> Generator[Progress, None, CostModel]:
    """The cost model of a target alone (no draft: auto's prompt lookups price themselves
    against its curve, costmodel/lookup.py); the draft curve is free."""
    curve = None if recalibrate else (cm.target if cm is not None else load_curve(target))
    if curve is None:
        curve = yield from _timed(target, recalibrate)
    if cm is None:
        cm = CostModel(curve, CostCurve([1], [0.0]))
    cm.target = curve
    target.on_decode = cm.target.observe  # heals from live decodes, as with a pair
    cm.target.where = length_of(target)
    return cm


def _timed(ctx: Context, full: bool) -> Generator[Progress, None, CostCurve]:
    gen = timing_steps(ctx, full=full)
    name = ctx.model.path.name
    while True:
        try:
            done, total = next(gen)
        except StopIteration as stop:
            return stop.value
        yield name, done, total


def model_for(
    target: Context, draft: Context, greedy: bool = True, cm: CostModel | None = None, recalibrate: bool = False
) -> CostModel:
    """The cost model of a (target, draft) pair: `cm` when given (curves already measured),
    else curves loaded from the cache or timed now.

    The acceptance estimate is loaded from this pair's previous runs (kept apart for greedy
    and sampled targets, whose acceptance differs) and saved after each turn.
    """
    gen = model_steps(target, draft, greedy, cm, recalibrate)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def save(target: Context, draft: Context | None, cm: CostModel) -> None:
    """Persist what this turn learned: the acceptance and any healed curve."""
    cm.save_acceptance()
    for ctx, curve in ((target, cm.target), (draft, cm.draft)):
        if ctx is None:
            continue
        if curve.dirty:
            save_curve(ctx, curve)
