"""Block verification of one draft, "GBV" (Sun et al., arXiv 2403.10444), docs/algorithms.md#gbv.

Lossless, never worse than token-level SD in expectation, optimal for one draft. Uses draft 0
only; the rule itself lives in `blockverify` (shared with MDBV, which feeds it another law).
"""

from __future__ import annotations

import numpy as np

from localspec.verify.blockverify import block_verify, positive_part_sum
from localspec.verify.common import Decision, as_inputs, ratio
from localspec.verify.greedy import greedy_or_none
from localspec.verify.rng import RNG


def gbv(rng: RNG, p, q, x, *, greedy: bool | None = None) -> Decision:
    """Block verification of draft 0 against its own draft law q."""
    p, q, x, _, _ = as_inputs(p, q, x)
    fast = greedy_or_none(p, x, greedy, mode="first")
    if fast is not None:
        return fast
    p0, q0, xs = p[0], q[0], x[0].tolist()
    ratios = [ratio(float(p0[i, t]), float(q0[i, t])) for i, t in enumerate(xs)]

    def mass(i: int, w: float) -> float:
        return positive_part_sum(w, p0[i], q0[i])

    def residual(i: int, w: float) -> tuple[np.ndarray, np.ndarray]:
        return np.maximum(p0[i] * w - q0[i], 0.0), p0[i]

    tau, token = block_verify(rng, ratios, mass, residual, p0[-1])
    return Decision(0, tau, token)
