"""One slot's view of a shared cost curve: what its tokens ADD to a round others also fill.

Why: with `serve -np N` a slot's verify block is decoded in one llama_decode with the other
slots' tokens (backend/slots.py). The time a slot's choice costs the server is then the
marginal cost curve(B + n) - curve(B), B being what the others put in the round, not
curve(n): on a CPU, where a bigger batch costs nearly in proportion, speculation that pays
for a lone request may not pay inside a full round, and auto should see that. Everything
else (healing from live decodes, staleness, saving) is the shared curve's: a combined
decode is a true measurement of curve(B + n).
"""

from __future__ import annotations

from collections.abc import Callable

from localspec.costmodel.curves import CostCurve

FLOOR = 0.1


class InRound:
    """A CostCurve look-alike: calls price n tokens on top of `others()`; the rest delegates."""

    __slots__ = ("curve", "others")

    def __init__(self, curve: CostCurve, others: Callable[[], float]) -> None:
        object.__setattr__(self, "curve", curve)
        object.__setattr__(self, "others", others)

    def __call__(self, n: int) -> float:
        b = self.others()
        if b <= 0.0:
            return self.curve(n)
        lo = int(b)
        base = self.curve(lo) if lo >= 1 else 0.0
        # a flat stretch of the measured curve would price tokens at zero (and AR's rate at
        # infinity): a token in a round costs at least FLOOR of what it costs alone
        return max(self.curve(lo + n) - base, FLOOR * self.curve(n))

    def __getattr__(self, name: str):  # noqa: ANN204 - healing, staleness, saving: the shared curve's
        return getattr(self.curve, name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self.curve, name, value)
