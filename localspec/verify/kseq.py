"""SpecTr's K-SEQ (Sun et al., NeurIPS 2023), docs/algorithms.md#spectr: one token from n candidates.

beta(rho) = sum_v min(q(v), p(v)/rho); rho* in [1, n] is the smallest rho with
rho*beta(rho) >= 1 - (1 - beta(rho))^n (the "upper end" of the bisection in the paper).
Candidates are tried in order, each accepted with probability min(1, p(c)/(rho* q(c))); none
accepted: a token of the residual p - min(q, p/rho*) (1 - (1-beta)^n)/beta.

Cost: never a 60-step bisection over a 152k row. beta is piecewise in rho with breakpoints at
the ratios p/q; only ratios inside (1, n_max) can be breakpoints, so one pass splits the
support into "always p/rho" (ratio <= 1), "always q" (ratio >= n_max) and a band between.
The band is bucketed once by the top bits of the ratio (exact, monotone, no sort); every
rho_n (n <= n_max) is then a bisection over bucket edges (prefix sums, scalar steps), a sort
of the one bucket holding the root, and a scalar Newton solve inside the final segment.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from localspec.verify.common import choose_residual, dot, ratio
from localspec.verify.rng import RNG


class RatioTable:
    """One node's rows restricted to supp(q) in float64, split by ratio r = p/q into
    low (r <= 1: contributes p/rho), high (r >= n_max: contributes q) and the band between.

    `idx` maps compact positions to vocabulary ids (None: the rows are dense, identity)."""

    def __init__(self, p_row: np.ndarray, q_row: np.ndarray, n_max: int) -> None:
        idx = np.flatnonzero(q_row > 0)
        if idx.size == q_row.size:
            self.idx: np.ndarray | None = None
            self.p = np.asarray(p_row, dtype=np.float64)
            self.q = np.asarray(q_row, dtype=np.float64)
        else:
            self.idx = idx
            self.p = p_row[idx].astype(np.float64)
            self.q = q_row[idx].astype(np.float64)
        self.r = r = self.p / self.q
        self.n_max = max(int(n_max), 1)
        self.low = r <= 1.0
        high = r >= self.n_max
        self.low_p = dot(self.low, self.p)
        self.low_q = dot(self.low, self.q)
        self.high_q = dot(high, self.q)
        self.band = np.flatnonzero(~(self.low | high))  # compact positions, unsorted
        self.rb, self.qb, self.pb = r[self.band], self.q[self.band], self.p[self.band]
        self.beta1 = self.low_p + float(self.qb.sum()) + self.high_q  # sum_v min(p, q)
        self._rho: dict[int, tuple[float, float]] = {}
        self._bk: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def pos(self, v: int) -> int:
        """Compact position of vocabulary id v (v must have q(v) > 0)."""
        return v if self.idx is None else int(np.searchsorted(self.idx, v))

    def rho(self, n: int) -> tuple[float, float]:
        """(rho*_n, beta(rho*_n)) for n <= n_max candidates (cached per n)."""
        hit = self._rho.get(n)
        if hit is None:
            hit = self._rho[n] = self._solve(n)
        return hit

    def _buckets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Band tokens bucketed by the top bits of their ratio (exponent + 10 mantissa bits):
        bucket(r) never decreases with r and bucket k is exactly [edge(k), edge(k+1)), so sums
        over {ratio >= edge} are exact prefix sums -- no sort. Built once per table."""
        if self._bk is None:
            bk = ((self.rb.view(np.uint64) - _ONE) >> _SHIFT).astype(np.intp)
            nb = _bucket(self.n_max) + 1
            self._bk = (
                bk,
                np.concatenate(([0.0], np.cumsum(np.bincount(bk, weights=self.qb, minlength=nb)))),
                np.concatenate(([0.0], np.cumsum(np.bincount(bk, weights=self.pb, minlength=nb)))),
            )
        return self._bk

    def below(self, t: float) -> tuple[float, float]:
        """(sum q, sum p) over the band tokens with ratio < t."""
        if t <= 1.0:
            return 0.0, 0.0
        if self.rb.size <= _SMALL:
            part = np.flatnonzero(self.rb < t)
            return float(self.qb[part].sum()), float(self.pb[part].sum())
        bk, cq, cp = self._buckets()
        k = min(_bucket(t), cq.size - 1)
        part = np.flatnonzero(bk == k) if k < cq.size - 1 else bk[:0]
        part = part[self.rb[part] < t]  # t's own bucket, token by token
        return float(cq[k]) + float(self.qb[part].sum()), float(cp[k]) + float(self.pb[part].sum())

    def ties(self, t: float) -> np.ndarray:
        """Band indices of the tokens whose ratio equals t."""
        return np.flatnonzero(self.rb == t)

    def _solve(self, n: int) -> tuple[float, float]:
        b1 = self.beta1
        if n <= 1 or b1 - 1.0 + max(1.0 - b1, 0.0) ** n >= 0.0:
            return 1.0, b1
        if self.rb.size <= _SMALL:  # few breakpoints: test them all at once
            keep = self.rb < n
            sq = self.high_q + float(self.qb[~keep].sum())
            return _solve_sorted(
                self.rb[keep], self.qb[keep], self.pb[keep], n, sq, self.low_p, 1.0, n
            )
        bk, cq, cp = self._buckets()
        tot_q = float(cq[-1])

        def g_edge(k: int) -> float:  # tokens in buckets >= k add q, the others p/rho
            rho = _edge(k)
            beta = self.high_q + tot_q - float(cq[k]) + (self.low_p + float(cp[k])) / rho
            return rho * beta - 1.0 + max(1.0 - beta, 0.0) ** n

        # g increases with rho: bisect for the first bucket edge in (1, n] with g >= 0
        kn = _bucket(float(n))
        a, b = 1, kn + 1
        while a < b:
            mid = (a + b) // 2
            if g_edge(mid) >= 0.0:
                b = mid
            else:
                a = mid + 1
        lo, hi = _edge(a - 1), min(_edge(a), float(n))  # a = kn+1: the root is in (edge(kn), n]
        inside = np.flatnonzero(bk == a - 1)
        r, q, p = self.rb[inside], self.qb[inside], self.pb[inside]
        past = r >= hi  # only when hi = n cuts the bucket: those add q
        sq = self.high_q + tot_q - float(cq[a]) + float(q[past].sum())
        sp = self.low_p + float(cp[a - 1])
        keep = ~past
        return _solve_sorted(r[keep], q[keep], p[keep], n, sq, sp, lo, hi)


_SMALL = 256  # bands up to this size are solved directly, larger ones through buckets
_ONE = np.float64(1.0).view(np.uint64)
_SHIFT = np.uint64(42)  # 52 mantissa bits - 10 kept: 1024 buckets per octave of ratio
_ONE_INT, _SHIFT_INT = int(_ONE), int(_SHIFT)


def _bucket(x: float) -> int:
    """Bucket of a ratio x >= 1 (plain integers: numpy scalars are slow here)."""
    return (struct.unpack("<q", struct.pack("<d", x))[0] - _ONE_INT) >> _SHIFT_INT


def _edge(k: int) -> float:
    """Smallest ratio in bucket k."""
    return struct.unpack("<d", struct.pack("<q", _ONE_INT + (k << _SHIFT_INT)))[0]


def _solve_sorted(
    r: np.ndarray,
    q: np.ndarray,
    p: np.ndarray,
    n: int,
    sq0: float,
    sp0: float,
    lo: float,
    hi: float,
) -> tuple[float, float]:
    """Root in (lo, hi] given the breakpoints r inside (lo, hi) and the constant parts sq0 (q
    of ratios >= hi) and sp0 (p of ratios <= lo): sort the few breakpoints, test the sign at
    each at once, solve inside the bracketing segment."""
    o = np.argsort(r)
    rb = r[o]
    cq = np.concatenate(([0.0], np.cumsum(q[o])))
    cp = np.concatenate(([0.0], np.cumsum(p[o])))
    bt = sq0 + (cq[-1] - cq[:-1]) + (sp0 + cp[:-1]) / rb
    gt = rb * bt - 1.0 + np.maximum(1.0 - bt, 0.0) ** n
    ok = gt >= 0.0
    first = int(np.argmax(ok)) if ok.any() else rb.size
    top = float(rb[first]) if first < rb.size else hi
    bot = float(rb[first - 1]) if first > 0 else lo
    k = int(np.searchsorted(rb, top, side="left"))
    sq = sq0 + float(cq[-1] - cq[k])  # ratio >= top: contributes q
    sp = sp0 + float(cp[k])  # ratio <= bot: contributes p/rho
    rho = solve_segment(sq, sp, n, bot, top)
    return rho, sq + sp / rho


def _h(x: float, sq: float, sp: float, n: int) -> float:
    return x * sq + sp - 1.0 + max(1.0 - sq - sp / x, 0.0) ** n


def solve_segment(sq: float, sp: float, n: int, lo: float, hi: float) -> float:
    """Smallest rho in [lo, hi] with h(rho) = rho sq + sp - 1 + (1 - sq - sp/rho)^n >= 0,
    where beta = sq + sp/rho holds on the whole segment. h increases: safeguarded Newton to
    convergence, then an ulp-level polish so the answer is the first float with h >= 0 (the
    residual of K-SEQ is non-negative exactly when h(rho) >= 0)."""
    if _h(hi, sq, sp, n) < 0.0:  # rounding at the bracket's end: keep the safe side
        return hi
    if _h(lo, sq, sp, n) >= 0.0:
        return lo
    a, b, x = lo, hi, hi
    for _ in range(60):
        hx = _h(x, sq, sp, n)
        if hx >= 0.0:
            b = x
        else:
            a = x
        if b - a <= 4e-16 * b:
            return b
        z = max(1.0 - sq - sp / x, 0.0)
        d = sq + n * z ** (n - 1) * sp / (x * x)
        xn = x - hx / d if d > 0.0 else 0.5 * (a + b)
        if abs(xn - x) <= 1e-15 * x:  # converged (possibly from one side): polish below
            break
        x = xn if a < xn < b else 0.5 * (a + b)
    y = x
    for _ in range(64):  # up to the first float with h >= 0 ...
        if _h(y, sq, sp, n) >= 0.0:
            break
        y = math.nextafter(y, math.inf)
    else:
        return b
    for _ in range(64):  # ... and down while h stays >= 0
        down = math.nextafter(y, -math.inf)
        if down < a or _h(down, sq, sp, n) < 0.0:
            break
        y = down
    return min(y, b)


def kseq_step(rng: RNG, p_row: np.ndarray, q_row: np.ndarray, cands: list[int]) -> int:
    """K-SEQ with the given candidates (i.i.d. draws of q_row); returns the emitted token."""
    n = len(cands)
    rs = [ratio(float(p_row[c]), float(q_row[c])) for c in cands]
    if n == 1:
        if rs[0] >= 1.0 or rng.flip(rs[0]):
            return cands[0]
        return choose_residual(rng, np.maximum(p_row - q_row, 0.0), p_row)
    table: RatioTable | None = None
    rho = beta = 1.0
    for c, rc in zip(cands, rs, strict=True):
        if rc >= n:  # accepted for every rho in [1, n]: no need to solve for rho
            return c
        if table is None:
            table = RatioTable(p_row, q_row, n)
            rho, beta = table.rho(n)
        if rc >= rho or rng.flip(rc / rho):
            return c
    assert table is not None
    return choose_residual(rng, kseq_residual(table, p_row, rho, beta, n), p_row)


def kseq_residual(
    table: RatioTable, p_row: np.ndarray, rho: float, beta: float, n: int
) -> np.ndarray:
    """p - min(q, p/rho) (1 - (1-beta)^n)/beta over the full row (unnormalised, clipped)."""
    res = np.array(p_row, dtype=np.float64)
    if beta <= 0.0:
        return res
    coef = (1.0 - (1.0 - beta) ** n) / beta
    y = np.minimum(table.q, table.p / rho)
    if table.idx is None:
        res -= y * coef
    else:
        res[table.idx] -= y * coef
    return np.maximum(res, 0.0, out=res)
