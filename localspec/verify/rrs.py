"""Recursive rejection sampling over the draft tree, each draft with its OWN q (SpecInfer's
multi-step speculative sampling; Miao et al., ASPLOS 2024), docs/algorithms.md#rrs.

Why a rule of its own: spectr and mdbv assume the K drafts are i.i.d. samples of ONE draft
distribution (they read q off the first alive draft). A stacked trie (decode/drafters/combine.py)
mixes proposers: a prompt lookup's point mass beside the draft model's sampled drafts, each
drawn independently of the others given the prefix but from a different q. At each depth,
starting from the target row r = p: the alive drafts' tokens are tried in draft order, each
accepted with probability min(1, r(y)/q_k(y)) under its own q_k; a rejection replaces r by
norm(max(r - q_k, 0)). A candidate accepted keeps the drafts that agree with it; none
accepted emits a token of the last r (the correction). All depths accepted: a bonus token
from p. Each step is a rejection sampler whose proposal is independent of what came before
it, so the emitted token has law r at every stage and the output law is the target's,
for any mix of q (tests/test_verify_exact.py enumerates point masses and mixes).

A draft that ended early is padded (decode/blocks.py) with a token p never emits and q = 1:
it is always rejected without changing r, which is exactly "this draft has no candidate".
"""

from __future__ import annotations

import numpy as np

from localspec.verify.common import TINY, Decision, as_inputs, choose_residual, ratio
from localspec.verify.greedy import greedy_or_none
from localspec.verify.rng import RNG


def rrs(rng: RNG, p, q, x, *, greedy: bool | None = None) -> Decision:
    """Recursive rejection over the merged draft tree with per-draft q (module docstring)."""
    p, q, x, K, L = as_inputs(p, q, x)
    fast = greedy_or_none(p, x, greedy, mode="tree")
    if fast is not None:
        return fast
    xs = x.tolist()
    alive = list(range(K))
    for i in range(L):
        k0 = alive[0]  # alive drafts share x[.][:i], hence the same target rows
        r: np.ndarray | None = None  # the residual, materialized at the first rejection
        y = None
        for k in alive:
            t = xs[k][i]
            rt = float(p[k0, i, t]) if r is None else float(r[t])
            if rng.flip(ratio(rt, float(q[k, i, t]))):
                y = t
                break
            r = np.maximum((p[k0, i] if r is None else r) - q[k, i], 0.0)
            s = float(r.sum(dtype=np.float64))
            if s > TINY:
                r = r / s
        if y is None:
            return Decision(k0, i, choose_residual(rng, p[k0, i] if r is None else r, p[k0, i]))
        alive = [k for k in alive if xs[k][i] == y]
    return Decision(alive[0], L, rng.choose(p[alive[0], L]))
