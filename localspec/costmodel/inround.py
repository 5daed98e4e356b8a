"""One slot's view of a shared cost curve: what its tokens ADD to a round others also fill.

Why: with `serve -np N` a slot's verify block is decoded in one llama_decode with the other
slots' tokens (backend/slots.py). The time a slot's choice costs the server is then what
its tokens add to that round, not curve(n). Alone in the round (no other slot active) it
is the plain curve, and auto speculates as for a lone request.

Sharing a round, every token the slot adds is priced at the round's marginal cost of one,
curve(B + 1) - curve(B) (B: what the others put in it): n tokens cost n of those. So a
draft block can never beat a plain step there, and a sharing slot decodes plainly.
Measured with `localspec bench slots` on the 2-core machine (F16 1.5B <- Q4_0 0.5B, 4 slots
x 128 tokens, docs/performance.md#slots): the round is compute-bound; sd L = 2 in every
slot gave 1.01-1.15x AR over four runs, sd L = 4 1.03-1.13x. Pricing a block by the curve's
own marginal, curve(B + n) - curve(B), or against what the others emit per round, made
slots choose on their own, out of step, and lose 18-21 % to AR in every slot: curves timed
on one sequence under-price a mixed round by ~25 %, and one slot's draft steps stall the
others' rounds. A flatter curve (a GPU) is where in-round speculation would pay; that is
not measured.
Healing from live decodes, staleness and saving are the shared curve's.
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
        return self._price(self.curve, n)

    def quiet(self, n: int) -> float:
        """The in-round price at the quiet machine's prices (what a contended probe reads)."""
        return self._price(self.curve.quiet, n)

    def _price(self, curve: Callable[[int], float], n: int) -> float:
        b = self.others()
        if b <= 0.0:
            return curve(n)
        lo = int(b)
        base = curve(lo) if lo >= 1 else 0.0
        # a flat stretch of the measured curve would price a token at zero (and AR's rate at
        # infinity): a token in a round costs at least FLOOR of what it costs alone
        return n * max(curve(lo + 1) - base, FLOOR * curve(1))

    def sharing(self) -> bool:
        """Whether other slots share the round now (what a plain-decoding note says)."""
        return self.others() > 0.0

    def __getattr__(self, name: str):  # noqa: ANN204 - healing, staleness, saving: the shared curve's
        return getattr(self.curve, name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self.curve, name, value)
