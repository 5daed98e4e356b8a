"""Which draft prices a quiet machine can have: the rule that tells contention from truth.

A draft model much smaller than its target (at most SMALLER of its file size: parameters x
bits per weight), computing on the same devices with the same threads, cannot take longer
per decode of n tokens than the target does: it does a fraction of the same work. A draft
price above the target's quiet price is therefore a busy machine (a C++ build starving the
draft's threads: 1.4 s draft steps against ~40 ms target ones, issue 40), never the pair's
truth. Such a price is contention (curves.py): it prices decisions while it lasts, is never
saved, and saved prices above the bound are dropped when a cost model is built.

Different devices (a GPU target, a CPU draft) or thread counts set no bound: there a small
draft can really be the slower one.
"""

from __future__ import annotations

from collections.abc import Callable

from localspec.backend import Context
from localspec.costmodel.curves import CostCurve

SMALLER = 0.5  # a draft file at most this share of the target's: its decode cannot cost more


def _devices(ctx: Context) -> str:
    """Where a context computes, without the layer counts (two models have different
    ones): the devices holding layers, and the settings after them (threads included)."""
    key = getattr(ctx, "placement_key", None)
    if not isinstance(key, str):
        return f"t={getattr(ctx, 'threads', None)}"
    layers, _, rest = key.partition("|")
    held = sorted(d for d, _, n in (p.partition(":") for p in layers.split(",")) if n != "0")
    return ",".join(held) + "|" + rest


def much_smaller(target: Context, draft: Context) -> bool:
    """Whether the draft's file is at most SMALLER of the target's, on the same devices."""
    try:
        t, d = target.model.path.stat().st_size, draft.model.path.stat().st_size
    except (AttributeError, OSError):
        return False
    return d <= SMALLER * t and _devices(target) == _devices(draft)


def draft_ceiling(target: Context, draft: Context, target_curve: CostCurve) -> Callable[[int], float] | None:
    """The dearest a quiet machine prices n draft tokens (the target's quiet price of n), or
    None where the pair sets no bound."""
    return target_curve.quiet if much_smaller(target, draft) else None


def settle(target: Context, draft: Context, target_curve: CostCurve, draft_curve: CostCurve) -> None:
    """Give the draft's curve its ceiling, and drop the saved draft prices above it (healed
    sizes an older cache kept from a busy minute)."""
    ceiling = draft_ceiling(target, draft, target_curve)
    draft_curve.ceiling = ceiling
    if ceiling is not None and any(v > ceiling(n) for n, v in draft_curve.healed.items()):
        draft_curve.forget(lambda n, v: v > ceiling(n))


def implausible(target: Context, draft: Context, target_curve: CostCurve | None, draft_curve: CostCurve | None) -> bool:
    """Whether the draft's timed curve itself is above its ceiling (it was timed while the
    machine was busy): timing_plan times it again, once per process."""
    if target_curve is None or draft_curve is None:
        return False
    ceiling = draft_ceiling(target, draft, target_curve)
    return ceiling is not None and draft_curve.measured(1) > ceiling(1)
