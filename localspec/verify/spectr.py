"""SpecTr draft tree (Sun, Suresh, Ro, Beirami, Jain, Yu; NeurIPS 2023), docs/algorithms.md#spectr.

Walk the prefix tree of the K drafts: at depth i run K-SEQ on the tokens of the drafts still
alive (those equal to the emitted prefix), keep the drafts whose token equals the output;
none alive -> stop with that token as the correction; all L depths -> bonus from p. Lossless,
(1 - 1/e)-optimal per token.
"""

from __future__ import annotations

from localspec.verify.common import Decision, as_inputs
from localspec.verify.greedy import greedy_or_none
from localspec.verify.kseq import kseq_step
from localspec.verify.rng import RNG


def spectr(rng: RNG, p, q, x, *, greedy: bool | None = None) -> Decision:
    """SpecTr K-SEQ over the merged draft tree (see the module docstring)."""
    p, q, x, K, L = as_inputs(p, q, x)
    fast = greedy_or_none(p, x, greedy, mode="tree")
    if fast is not None:
        return fast
    xs = x.tolist()
    alive = list(range(K))
    for i in range(L):
        k0 = alive[0]  # alive drafts share x[.][:i], hence the same rows
        y = kseq_step(rng, p[k0, i], q[k0, i], [xs[k][i] for k in alive])
        keep = [k for k in alive if xs[k][i] == y]
        if not keep:
            return Decision(k0, i, y)
        alive = keep
    return Decision(alive[0], L, rng.choose(p[alive[0], L]))
