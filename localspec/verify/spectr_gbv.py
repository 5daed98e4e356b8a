"""SpecTr-GBV as published (Lin, Sheng, Cai, Zhou; arXiv 2604.25925), docs/algorithms.md#spectr-gbv.

Reproduced faithfully for comparison -- it is NOT lossless for K >= 2. Exact enumeration
(tests/test_verify_spectr_gbv.py) shows it gives some prefixes more probability than the
target allows (toy, K=2: excess +0.024), so no later correction can repair it; with K = 1 it
is exact only together with the cross-iteration "Algorithm 2" (`algorithm2.SpectrGbvCarry`).

psi_K(a, b) = a (1 - min(b/a, 1))^K. Drafts are visited in order with the longest accepted
length tau so far and a set H of rejected sub-blocks (never re-tested). For draft k, only
sub-blocks u = x[k][:l] with l > tau are tested:
  l < L: h = [sum_v psi(P(uv), Q(uv)) - psi(P(u), Q(u))] /
             [1 - (1 - Q(u))^K - sum_v (P(uv) - psi(P(uv), Q(uv)))]   (Eq. 2, clipped)
  l = L: h = P(u) [1 - (1 - min(Q(u)/P(u), 1))^K] / [1 - (1 - Q(u))^K]; accepted -> stop.
Correction after tau < L: y ~ P(u*v) [1 - min(Q(u*v)/P(u*v), 1)^K] (Eq. 4 as released).
A vanishing denominator (the 0/0 of K = 1 with P(u) >= Q(u), or a deterministic draft) means
h = 1, which is also what keeps the rule's temperature-0 decision the greedy one.
"""

from __future__ import annotations

import numpy as np

from localspec.verify.common import Decision, as_inputs, choose_residual
from localspec.verify.greedy import greedy_or_none
from localspec.verify.rng import RNG

_ZERO_DEN = 1e-14


def _psi(a: np.ndarray, b: np.ndarray, K: int) -> np.ndarray:
    """psi_K for a > 0 (callers restrict to the target's support, where psi is defined)."""
    return a * np.maximum(1.0 - b / a, 0.0) ** K


def _psi1(a: float, b: float, K: int) -> float:
    return a * max(1.0 - b / a, 0.0) ** K if a > 0.0 else 0.0


def sub_block_h(P: float, Q: float, p_row: np.ndarray, q_row: np.ndarray, K: int) -> float:
    """Eq. 2 for u with joints (P, Q) and next-token rows p(.|u), q(.|u)."""
    sup = np.flatnonzero(p_row > 0)  # psi(0, b) = 0 and P(uv) - psi = 0 off the support
    a = P * p_row[sup].astype(np.float64)
    b = Q * q_row[sup].astype(np.float64)
    psi = _psi(a, b, K) if P > 0.0 else np.zeros_like(a)
    num = float(psi.sum()) - _psi1(P, Q, K)
    den = 1.0 - (1.0 - Q) ** K - float((a - psi).sum())
    if den <= _ZERO_DEN:
        return 1.0
    return min(max(num / den, 0.0), 1.0)


def full_block_h(P: float, Q: float, K: int) -> float:
    """The l = L test: P [1 - (1 - min(Q/P, 1))^K] / [1 - (1 - Q)^K]."""
    den = 1.0 - (1.0 - Q) ** K
    if den <= _ZERO_DEN:
        return 1.0
    return min(max((P - _psi1(P, Q, K)) / den, 0.0), 1.0)


def spectr_gbv(rng: RNG, p, q, x, *, greedy: bool | None = None) -> Decision:
    """The published SpecTr-GBV rule (biased for K >= 2; see the module docstring)."""
    p, q, x, K, L = as_inputs(p, q, x)
    fast = greedy_or_none(p, x, greedy, mode="tree")
    if fast is not None:
        return fast
    xs = x.tolist()
    tau, kstar, Ps, Qs = 0, 0, 1.0, 1.0
    rejected: set[tuple[int, ...]] = set()
    for k in range(K):
        P = Q = 1.0
        for j in range(tau):  # joints of draft k's own first tau tokens
            P *= float(p[k, j, xs[k][j]])
            Q *= float(q[k, j, xs[k][j]])
        for ell in range(tau + 1, L):  # only sub-blocks longer than the current tau
            P *= float(p[k, ell - 1, xs[k][ell - 1]])
            Q *= float(q[k, ell - 1, xs[k][ell - 1]])
            key = tuple(xs[k][:ell])
            if key in rejected:
                continue
            if rng.flip(sub_block_h(P, Q, p[k, ell], q[k, ell], K)):
                tau, kstar, Ps, Qs = ell, k, P, Q  # a later success overwrites
            else:
                rejected.add(key)
        P *= float(p[k, L - 1, xs[k][L - 1]])
        Q *= float(q[k, L - 1, xs[k][L - 1]])
        if rng.flip(full_block_h(P, Q, K)):  # the full block is not checked against H
            tau, kstar = L, k
            break
    if tau == L:
        return Decision(kstar, L, rng.choose(p[kstar, L]))
    return Decision(kstar, tau, _correction(rng, Ps, Qs, p[kstar, tau], q[kstar, tau], K))


def _correction(
    rng: RNG, Ps: float, Qs: float, p_row: np.ndarray, q_row: np.ndarray, K: int
) -> int:
    sup = np.flatnonzero(p_row > 0)
    a = Ps * p_row[sup].astype(np.float64)
    b = Qs * q_row[sup].astype(np.float64)
    res = np.zeros(p_row.shape[0])
    if Ps > 0.0:
        res[sup] = a * (1.0 - np.minimum(b / a, 1.0) ** K)
    return choose_residual(rng, res, p_row)
