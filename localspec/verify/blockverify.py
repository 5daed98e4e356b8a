"""Block verification (Sun et al., arXiv 2403.10444), docs/algorithms.md#gbv, for ANY draft law.

Shared by `gbv` (draft law = q) and `mdbv` (draft law = S, the law of the selected draft):
block verification is lossless for whatever law the verified block was drawn from, so the
two rules differ only in the rows they hand in here.

Weights w_0 = 1, w_i = min(1, w_{i-1} p(x_i|x^{i-1}) / s(x_i|x^{i-1})); for 1 <= i < L,
h_i = R_i / (R_i + 1 - w_i) with R_i = sum_v (w_i p(v|x^i) - s(v|x^i))+ (h = 1 on 0/0);
h_L = w_L. tau = the LAST i with eta_i <= h_i, drawn top-down (same law: the first success
from the top is the last success). Work is lazy: R_i (the only vocabulary-wide quantity) is
computed only when the top-down scan reaches i, and never when w_i is 0 (h = 0) or 1 (h = 1).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from localspec.verify.common import TINY, choose_residual
from localspec.verify.rng import RNG

# R(i, w_i) -> sum_v (w_i p_i - s_i)+        residual(tau, w_tau) -> (row, fallback row)
ResidualMass = Callable[[int, float], float]
ResidualRow = Callable[[int, float], tuple[np.ndarray, np.ndarray]]


def weights(ratios: list[float]) -> list[float]:
    """w_0..w_L from the per-position ratios p(x_i)/s(x_i) along the block."""
    w = [1.0]
    for a in ratios:
        prev = w[-1]
        w.append(0.0 if prev <= 0.0 else min(1.0, prev * a))
    return w


def block_verify(
    rng: RNG,
    ratios: list[float],
    mass: ResidualMass,
    residual: ResidualRow,
    bonus_row: np.ndarray,
) -> tuple[int, int]:
    """(tau, token) of block verification; see the module docstring for the rule."""
    L = len(ratios)
    w = weights(ratios)
    tau = 0
    for i in range(L, 0, -1):
        wi = w[i]
        if wi <= 0.0:
            continue
        if wi >= 1.0:
            tau = i
            break
        if i == L:
            h = wi
        else:
            r = mass(i, wi)
            den = r + 1.0 - wi
            h = r / den if den > TINY else 1.0
        if rng.flip(h):
            tau = i
            break
    if tau == L:
        return L, rng.choose(bonus_row)
    row, fallback = residual(tau, w[tau])
    return tau, choose_residual(rng, row, fallback)


def positive_part_sum(w: float, p_row: np.ndarray, s_row: np.ndarray) -> float:
    """sum_v (w p - s)+ in the rows' dtype, accumulated in float64."""
    t = p_row * w
    t -= s_row
    np.maximum(t, 0.0, out=t)
    return float(t.sum(dtype=np.float64))
