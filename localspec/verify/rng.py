"""The only door randomness comes through: `flip(prob)` and `choose(probs)`.

Every verifier draws exclusively through these two calls. That is what lets the test harness
replace the generator by one that explores *every* branch with its probability (exact
enumeration of a rule's output law, docs/algorithms.md#exactness) instead of sampling it.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

# Above this length `choose` samples in two levels (block sums, then one block) so a draw from
# a 152k-entry row costs two short cumsums instead of one long sequential one.
_BLOCK = 1024


class RNG(Protocol):
    """What a verifier needs from a random source."""

    def flip(self, prob: float) -> bool:
        """True with probability `prob` (clipped to [0, 1])."""
        ...

    def choose(self, probs: np.ndarray) -> int:
        """An index drawn proportionally to the non-negative weights `probs` (unnormalised)."""
        ...


class NumpyRNG:
    """Real sampling over a `numpy.random.Generator` (pass a Generator, a seed, or None)."""

    def __init__(self, gen: np.random.Generator | int | None = None) -> None:
        self.gen = gen if isinstance(gen, np.random.Generator) else np.random.default_rng(gen)

    def flip(self, prob: float) -> bool:
        if prob >= 1.0:
            return True
        if prob <= 0.0:
            return False
        return bool(self.gen.random() < prob)

    def choose(self, probs: np.ndarray) -> int:
        a = np.asarray(probs).ravel()
        n = a.size
        if n <= 4 * _BLOCK:
            return _inverse_cdf(a, self.gen.random())
        m = n - n % _BLOCK
        sums = a[:m].reshape(-1, _BLOCK).sum(axis=1, dtype=np.float64)
        tail = float(a[m:].sum(dtype=np.float64))
        weights = np.append(sums, tail) if m < n else sums
        b = _inverse_cdf(weights, self.gen.random())
        lo = b * _BLOCK
        return lo + _inverse_cdf(a[lo : min(lo + _BLOCK, n)], self.gen.random())


def _inverse_cdf(weights: np.ndarray, u: float) -> int:
    """Index i with cdf[i-1] <= u*total < cdf[i]; never lands on a zero-weight entry."""
    cdf = np.cumsum(weights, dtype=np.float64)
    total = cdf[-1]
    if not total > 0.0:
        raise ValueError("choose() needs at least one positive weight")
    i = int(np.searchsorted(cdf, u * total, side="right"))
    if i >= weights.size:  # u*total rounded up to total: take the last positive entry
        i = int(np.flatnonzero(np.asarray(weights) > 0)[-1])
    return i
