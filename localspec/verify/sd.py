"""Token-level speculative sampling (Leviathan et al. 2023; Chen et al. 2023), docs/algorithms.md#sd.

Accept x_i with probability min(1, p_i(x_i)/q_i(x_i)); at the first rejection emit a token of
norm((p_i - q_i)+) and stop; all accepted: a bonus token from p_L. Lossless. Uses draft 0 only.
Vocabulary-wide work: one residual row at the rejection point, nothing else.
"""

from __future__ import annotations

import numpy as np

from localspec.verify.common import Decision, as_inputs, choose_residual, ratio
from localspec.verify.greedy import greedy_or_none
from localspec.verify.rng import RNG


def sd(rng: RNG, p, q, x, *, greedy: bool | None = None) -> Decision:
    """Token-level speculative sampling of draft 0 (see the module docstring)."""
    p, q, x, _, L = as_inputs(p, q, x)
    fast = greedy_or_none(p, x, greedy, mode="first")
    if fast is not None:
        return fast
    xs = x[0].tolist()
    for i, t in enumerate(xs):
        a = ratio(float(p[0, i, t]), float(q[0, i, t]))
        if a >= 1.0 or rng.flip(a):
            continue
        residual = np.maximum(p[0, i] - q[0, i], 0.0)
        return Decision(0, i, choose_residual(rng, residual, p[0, i]))
    return Decision(0, L, rng.choose(p[0, L]))
