"""MDBV, the lossless multi-draft block verifier (docs/algorithms.md#mdbv): select a draft, then
block-verify it against the law of the selection.

Stage 1 (`selection`): walk the merged draft tree with K-SEQ-style pick kernels; the picked
draft X* is distributed exactly as a law S whose rows s(.|u) have a closed form.
Stage 2 (`blockverify`): §2 block verification of X* with s in place of q.

Why lossless: block verification is lossless for ANY draft law, and X* ~ S exactly.
Why better: the pick table contains SpecTr's acceptance table, so E[tau] >= SpecTr's; with
K = 1, S = q and it IS GBV (the call is delegated to `gbv`: same law, less work).
Cost: only rows on the selected path are touched; per node one split of supp(q) by ratio
and exact bucket sums over the (1, K) ratio band (no sort); an s row (one sort, restricted
to the tokens that can carry residual mass) only where block verification reads it.
"""

from __future__ import annotations

import numpy as np

from localspec.verify.blockverify import block_verify
from localspec.verify.common import Decision, as_inputs, ratio
from localspec.verify.gbv import gbv
from localspec.verify.greedy import greedy_or_none
from localspec.verify.rng import RNG
from localspec.verify.selection import SelectionNode


def mdbv(rng: RNG, p, q, x, *, greedy: bool | None = None) -> Decision:
    """Multi-draft block verification by draft selection (see the module docstring)."""
    p, q, x, K, L = as_inputs(p, q, x)
    fast = greedy_or_none(p, x, greedy, mode="mdbv")
    if fast is not None:
        return fast
    if K == 1:
        return gbv(rng, p, q, x, greedy=False)
    xs = x.tolist()
    alive = list(range(K))
    jmix = np.zeros(K + 1)
    jmix[K] = 1.0
    nodes: list[SelectionNode] = []
    s_path: list[float] = []
    for i in range(L):
        node = SelectionNode(p[alive[0], i], q[alive[0], i], jmix)
        v = node.sample(rng, [xs[k][i] for k in alive])
        s_v, jmix = node.descend(v)
        nodes.append(node)
        s_path.append(s_v)
        alive = [k for k in alive if xs[k][i] == v]
    k = alive[0]
    path = xs[k]
    ratios = [ratio(float(p[k, i, t]), s_path[i]) for i, t in enumerate(path)]

    def mass(i: int, w: float) -> float:
        return nodes[i].residual_mass(w)

    def residual(i: int, w: float) -> tuple[np.ndarray, np.ndarray]:
        return nodes[i].residual_row(w), p[k, i]

    tau, token = block_verify(rng, ratios, mass, residual, p[k, L])
    return Decision(k, tau, token)
