"""Stage 1 of MDBV (docs/algorithms.md#mdbv-select): pick one draft by walking the merged draft tree, and
carry the closed-form law S of the draft it picks.

At node u the n alive drafts' next tokens are i.i.d. q(.|u). Each candidate (in draft order)
is accepted with probability y(c)/q(c), y = min(q, p/rho_n) (K-SEQ's constant for n); the
first accepted one is picked; none accepted: the candidate ranked first by p/q (ties: lower
token id). With b = q - y, Y = sum y and B_>(v) = sum of b over the tokens ranked after v:

    pick_n(v) = y(v)/Y [1 - (1-Y)^n] + (B_>(v) + b(v))^n - B_>(v)^n

The selected path only reveals the multiplicity law j_u(n) = P(n_u = n | path), so the node's
row is s(v|u) = sum_n j_u(n) pick_n(v), and after picking v the law moves to
j'(m) ∝ sum_n j_u(n) P_n(v, m) (P_n: pick v with exactly m of the n candidates equal to v),
computed as polynomial coefficients in a token-counting variable t:

    accepted: y t sum_{j=1..n} (b t + a)^(j-1) (q t + c)^(n-j),  a = 1-q-(Y-y), c = 1-q
    fallback: (b t + B_>)^n - B_>^n

Selection and the walk need only scalars at the picked token (B_> comes from bucket prefix
sums of the ratio table, no sort). Rows of s are built lazily, only where block verification
reads them, and only on the tokens that can matter there (`SelectionNode._cutoff`).
"""

from __future__ import annotations

import math
from math import comb

import numpy as np

from localspec.verify.common import dot, ratio
from localspec.verify.kseq import RatioTable
from localspec.verify.rng import RNG


class SelectionNode:
    """One node of the selected path: kernels for every n with j_u(n) > 0, and s(.|u)."""

    def __init__(self, p_row: np.ndarray, q_row: np.ndarray, jmix: np.ndarray) -> None:
        self.p_row, self.q_row, self.jmix = p_row, q_row, jmix
        self.ns = [n for n in range(1, jmix.size) if jmix[n] > 0.0]
        self.table = RatioTable(p_row, q_row, max(self.ns))
        sol = [self.table.rho(n) for n in self.ns]
        self.rho = np.array([s[0] for s in sol])
        self.Y = np.array([s[1] for s in sol])
        self.jw = jmix[self.ns]
        self._s: tuple[float, np.ndarray | None, np.ndarray] | None = None

    # -- the walk -------------------------------------------------------------------------
    def sample(self, rng: RNG, cands: list[int]) -> int:
        """The picked token among the alive drafts' tokens `cands` (draft order)."""
        rho = self.table.rho(len(cands))[0]
        rs = [ratio(float(self.p_row[c]), float(self.q_row[c])) for c in cands]
        for c, rc in zip(cands, rs, strict=True):
            if rc >= rho or rng.flip(rc / rho):
                return c
        return min(zip(rs, cands, strict=True), key=lambda t: (-t[0], t[1]))[1]

    def descend(self, v: int) -> tuple[float, np.ndarray]:
        """(s(v|u), j_{uv}) after picking v."""
        qv, pv = float(self.q_row[v]), float(self.p_row[v])
        after = self._after_sums(v)
        out = [0.0] * self.jmix.size
        for n, jn, rho, Y, (sq, sp) in zip(
            self.ns, self.jw.tolist(), self.rho.tolist(), self.Y.tolist(), after, strict=True
        ):
            y = min(qv, pv / rho)
            big_b = max(sq - sp / rho, 0.0)
            for m, pm in enumerate(_mult_row(n, qv, y, qv - y, Y, big_b)):
                out[m] += jn * pm
        s_v = sum(out)
        return s_v, np.array(out) / s_v

    def _after_sums(self, v: int) -> list[tuple[float, float]]:
        """Per n: (sum q, sum p) over the tokens ranked after v (ratio below v's, or equal
        with a higher id) whose ratio is below rho_n -- exactly those with b = q - p/rho_n > 0.
        No sort: bucket prefix sums of the table's band, or one masked pass."""
        t = self.table
        pos = t.pos(v)
        rv = float(t.r[pos])
        res = []
        if rv > 1.0:  # every low token is after v with b > 0; band tokens below min(rv, rho)
            tie_q = tie_p = 0.0
            if rv < float(self.rho.max()):  # equal ratio and a higher id: also after v
                tie = t.ties(rv)
                tie = tie[t.band[tie] > pos]
                tie_q, tie_p = float(t.qb[tie].sum()), float(t.pb[tie].sum())
            for rho in self.rho.tolist():
                bq, bp = t.below(min(rv, rho))
                if rv < rho:
                    bq, bp = bq + tie_q, bp + tie_p
                res.append((t.low_q + bq, t.low_p + bp))
            return res
        # rv <= 1 <= rho_n: the tokens after v are low ones, the same set for every n
        after = (t.r < rv).astype(np.float64)
        tie = np.flatnonzero(t.r == rv)
        after[tie[tie > pos]] = 1.0  # equal ratio, higher id
        sq, sp = dot(after, t.q), dot(after, t.p)
        return [(sq, sp)] * len(self.ns)

    # -- what block verification needs -------------------------------------------------------
    def s_compact(self) -> np.ndarray:
        """s(.|u) on all of supp(q) (the table's compact positions)."""
        return self._s_from(0.0)[1]

    def residual_mass(self, w: float) -> float:
        """sum_v (w p(v|u) - s(v|u))+ over the whole row (s = 0 off supp(q))."""
        t = self.table
        inc, s = self._part(w)
        p = t.p if inc is None else t.p[inc]
        inside = float(np.maximum(w * p - s, 0.0).sum())
        if t.idx is None:
            return inside
        outside = float(self.p_row.sum(dtype=np.float64)) - float(t.p.sum())
        return inside + w * max(outside, 0.0)

    def residual_row(self, w: float) -> np.ndarray:
        """(w p - s)+ over the whole row (unnormalised)."""
        t = self.table
        inc, s = self._part(w)
        pos = np.arange(t.q.size) if inc is None else inc
        vals = np.maximum(w * t.p[pos] - s, 0.0)
        if t.idx is None:
            row = np.zeros(t.q.size)
            row[pos] = vals
            return row
        row = np.asarray(self.p_row, dtype=np.float64) * w
        row[t.idx] = 0.0
        row[t.idx[pos]] = vals
        return row

    def _part(self, w: float) -> tuple[np.ndarray | None, np.ndarray]:
        """s on the only tokens that can have w p > s (cached per w; see `_cutoff`)."""
        hit = self._s
        if hit is None or hit[0] != w:
            self._s = hit = (w, *self._s_from(self._cutoff(w)))
        return hit[1], hit[2]

    def _coef(self) -> list[float]:
        """Accepted-part weights: s >= A = sum_n coef_n y_n, coef_n = j_n (1-(1-Y_n)^n)/Y_n."""
        return [
            jn * (1.0 - (1.0 - Y) ** n) / Y if Y > 0.0 else 0.0
            for n, jn, Y in zip(self.ns, self.jw.tolist(), self.Y.tolist(), strict=True)
        ]

    def _cutoff(self, w: float) -> float:
        """A ratio r_t such that every token with ratio < r_t has s >= A >= w p, so it adds
        nothing to (w p - s)+. A/p = f(r) = sum_n coef_n min(1/r, 1/rho_n) decreases in r:
        the excluded tokens are a ratio prefix, summed in bulk instead of sorted."""
        pairs = sorted(zip(self.rho.tolist(), self._coef(), strict=True))
        tail = sum(c / rho for rho, c in pairs)  # f(r) for r <= min rho
        if tail < w or w <= 0.0:
            return 0.0
        head = 0.0
        for k, (rho, c) in enumerate(pairs):  # on [rho_k, rho_k+1]: f = head/r + tail
            head, tail = head + c, tail - c / rho
            nxt = pairs[k + 1][0] if k + 1 < len(pairs) else math.inf
            if head / nxt + tail <= w:
                r_star = head / (w - tail) if w > tail else rho
                return max(r_star, rho) * (1.0 - 1e-9)
        return 0.0  # only reachable through rounding: excluding nothing is always exact

    def _s_from(self, r_t: float) -> tuple[np.ndarray | None, np.ndarray]:
        """(positions, s) for the tokens with ratio >= r_t (positions None: all of them).

        s = accepted part + fallback part. The fallback part of token v is
        sum_n j_n [(B + b)^n - B^n] with B the rejected mass b_n = (q - p/rho_n)+ of the
        tokens ranked after v: the tokens kept here are sorted, the excluded ones (all ranked
        after them) enter as one offset per n."""
        t = self.table
        coef = self._coef()
        inc = None if r_t <= 0.0 else np.flatnonzero(t.r >= r_t)
        r, q, p = (t.r, t.q, t.p) if inc is None else (t.r[inc], t.q[inc], t.p[inc])
        s = q * sum(coef)  # accepted part where y = q; corrected below where y = p/rho
        sub = np.flatnonzero(r < float(self.rho.max()))  # where some b_n can be > 0
        sub = sub[np.argsort(r[sub])]
        sub = _ties_by_id_descending(sub, r[sub])  # last-ranked first
        qo, po = q[sub], p[sub]
        m = sub.size
        acc, b, hi, lo, w1, w2 = (np.zeros(m), *(np.empty(m) for _ in range(5)))
        for n, jn, rho, c in zip(self.ns, self.jw.tolist(), self.rho.tolist(), coef, strict=True):
            if n == 1:  # pick_1 = q exactly: already in s (coef_1 = j_1)
                continue
            np.divide(po, rho, out=b)
            np.subtract(qo, b, out=b)
            np.maximum(b, 0.0, out=b)
            np.multiply(b, -c, out=w1)  # y = q - b
            acc += w1
            np.cumsum(b, out=hi)
            if inc is not None:  # rejected mass of the excluded tokens (all ranked after)
                hi += self._rejected_below(min(r_t, rho), rho)
            if n == 2:  # (B + b)^2 - B^2 = b (2 (B + b) - b)
                np.multiply(hi, 2.0, out=w1)
                w1 -= b
                w1 *= b
            else:
                np.subtract(hi, b, out=lo)  # B
                _ipow_into(hi, n, w1)
                _ipow_into(lo, n, w2)
                w1 -= w2
            w1 *= jn
            acc += w1
        s[sub] += acc
        return inc, s

    def _rejected_below(self, x: float, rho: float) -> float:
        """sum of (q - p/rho) over the tokens with ratio < x (x <= rho: all have b > 0)."""
        t = self.table
        if x > 1.0:
            bq, bp = t.below(x)
            sq, sp = t.low_q + bq, t.low_p + bp
        else:
            mask = t.r < x
            sq, sp = dot(mask, t.q), dot(mask, t.p)
        return max(sq - sp / rho, 0.0)


def _ties_by_id_descending(order: np.ndarray, r_sorted: np.ndarray) -> np.ndarray:
    """Within runs of equal ratio put higher positions first (the rank puts lower ids first,
    and `order` lists tokens from last-ranked to first). Ties are rare in real rows, so the
    fix-up only runs when there is one."""
    dup = r_sorted[1:] == r_sorted[:-1]
    if not dup.any():
        return order
    run = np.concatenate(([0], np.cumsum(~dup)))
    return order[np.lexsort((-order, run))]


def _ipow_into(x: np.ndarray, n: int, out: np.ndarray) -> None:
    """out = x**n for a small integer n by repeated multiplication (np.power is slower)."""
    np.copyto(out, x)
    for _ in range(n - 1):
        out *= x


def _mult_row(n: int, q: float, y: float, b: float, Y: float, big_b: float) -> list[float]:
    """P_n(v, m), m = 0..n: pick v with exactly m of the n candidates equal to v. Python
    floats: n <= K is tiny, and numpy calls would cost more than the arithmetic."""
    a = max(1.0 - q - (Y - y), 0.0)
    c = max(1.0 - q, 0.0)
    # S_k = sum_{j=1..k} A^(j-1) C^(k-j), A = a + b t, C = c + q t: S_{k+1} = C S_k + A^k
    s_poly, a_pow = [1.0], [1.0]
    for _ in range(n - 1):
        a_pow = _times_linear(a_pow, a, b)
        s_poly = [u + v for u, v in zip(_times_linear(s_poly, c, q), a_pow, strict=True)]
    row = [0.0] + [y * u for u in s_poly]
    for m in range(1, n + 1):
        row[m] += comb(n, m) * b**m * big_b ** (n - m)
    return row


def _times_linear(poly: list[float], c0: float, c1: float) -> list[float]:
    """poly(t) * (c0 + c1 t), coefficients lowest power first."""
    out = [c0 * u for u in poly] + [0.0]
    for i, u in enumerate(poly):
        out[i + 1] += c1 * u
    return out
