"""Shared vocabulary of the verifiers: the decision type, input checks, small row helpers.

Rows stay in the caller's dtype (float32 rows of 152k entries are never copied whole); only
the scalars (weights, joints, thresholds) and the compacted rows that need precision are
float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec.verify.rng import RNG

# Denominators at or below this are treated as the 0/0 of a probability-zero branch.
TINY = 1e-300


@dataclass(frozen=True, slots=True)
class Decision:
    """Keep x[k][:tau] of draft k, then emit `token` (a correction if tau < L, a bonus if tau = L)."""

    k: int
    tau: int
    token: int


def check_shapes(p: np.ndarray, q: np.ndarray, x: np.ndarray) -> tuple[int, int]:
    """(K, L) of a verification call, or a ValueError naming the bad argument."""
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"x must be (K, L) draft tokens with L >= 1, got shape {x.shape}")
    K, L = x.shape
    if p.ndim != 3 or p.shape[:2] != (K, L + 1):
        raise ValueError(f"p must be (K, L+1, V) = ({K}, {L + 1}, V), got {p.shape}")
    if q.ndim != 3 or q.shape[:2] != (K, L) or q.shape[2] != p.shape[2]:
        raise ValueError(f"q must be (K, L, V) = ({K}, {L}, {p.shape[2]}), got {q.shape}")
    return K, L


def as_inputs(p, q, x) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Arrays (no copy when already arrays) and (K, L)."""
    p, q, x = np.asarray(p), np.asarray(q), np.asarray(x)
    K, L = check_shapes(p, q, x)
    return p, q, x, K, L


def choose_residual(rng: RNG, residual: np.ndarray, fallback: np.ndarray) -> int:
    """Sample from a residual row; a residual with no mass only arises on probability-zero
    branches (or from rounding there), where any row keeps the law, so use `fallback`."""
    if float(residual.sum(dtype=np.float64)) > 1e-15:
        return rng.choose(residual)
    return rng.choose(fallback)


def ratio(pv: float, qv: float) -> float:
    """p/q for one token; a drafted token always has q > 0, the guard is for bad input only."""
    return pv / qv if qv > 0.0 else (np.inf if pv > 0.0 else 0.0)


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b) for 1-D rows (a may be a boolean mask). Deliberately not BLAS: OpenBLAS
    threads a 152k-entry dot and, on a busy 2-core machine, that costs ~16 ms instead of
    ~0.04 ms. Masked sums are written this way because a boolean gather is ~10x slower."""
    if a.dtype == np.bool_:
        a = a.astype(np.float64)
    return float(np.einsum("i,i->", a, b))
