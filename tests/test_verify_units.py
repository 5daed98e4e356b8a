"""Unit checks of the pieces the exact tests rely on: K-SEQ's rho*, MDBV's closed-form pick
law, the sampling adapter, compaction and dtype handling, full-vocabulary calls."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from localspec.verify import LOSSLESS, VERIFIERS, NumpyRNG
from localspec.verify.kseq import RatioTable
from localspec.verify.selection import SelectionNode
from tests.support import exact as E


def _g(rho: float, p: np.ndarray, q: np.ndarray, n: int) -> float:
    b = float(np.minimum(q, p / rho).sum())
    return rho * b - 1.0 + (1.0 - b) ** n


def _rho_bisection(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """Independent reference: 200-step bisection keeping the upper end (docs/algorithms.md#spectr)."""
    lo, hi = 1.0, float(n)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _g(mid, p, q, n) >= 0.0:
            hi = mid
        else:
            lo = mid
    return hi


def _rows(
    g: np.random.Generator, V: int, zeros: bool, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    p, q = g.dirichlet(alpha * np.ones(V)), g.dirichlet(alpha * np.ones(V))
    if zeros:
        p[g.random(V) < 0.3] = 0.0
        q[g.random(V) < 0.3] = 0.0
        p[0] = max(p[0], 1e-3)
        q[1] = max(q[1], 1e-3)
        p, q = p / p.sum(), q / q.sum()
    return p, q


@pytest.mark.parametrize("V", [2, 3, 7, 50, 3000])
def test_rho_matches_bisection(V: int) -> None:
    g = np.random.default_rng(V)
    for trial in range(12):
        p, q = _rows(g, V, zeros=trial % 2 == 1, alpha=(0.3, 1.0, 3.0)[trial % 3])
        table = RatioTable(p, q, 6)
        for n in range(1, 7):
            rho, beta = table.rho(n)
            ref = _rho_bisection(p, q, n)
            assert rho == pytest.approx(ref, rel=1e-12, abs=1e-12)
            assert beta == pytest.approx(float(np.minimum(q, p / rho).sum()), abs=1e-12)
            assert _g(rho, p, q, n) >= -1e-13  # residual non-negative (up to summation order)
            if rho > 1.0:
                assert _g(rho * (1 - 1e-9), p, q, n) < 0.0  # and rho is the smallest such


def _pick_law_bruteforce(
    node: SelectionNode, q: np.ndarray, n: int
) -> dict[tuple[int, int], float]:
    """P(pick v, m candidates equal v) by enumerating all n-tuples of candidates."""
    out: dict[tuple[int, int], float] = {}
    support = [int(v) for v in np.flatnonzero(q)]
    for cands in itertools.product(support, repeat=n):
        w = float(np.prod(q[list(cands)]))

        def pick(rng, cands=cands):
            from localspec.verify import Decision

            return Decision(0, 0, node.sample(rng, list(cands)))

        for (_, _, v), pr in E.enumerate_outputs(pick).items():
            key = (v, cands.count(v))
            out[key] = out.get(key, 0.0) + w * pr
    return out


@pytest.mark.parametrize("zeros", [False, True])
def test_selection_law_matches_bruteforce(zeros: bool) -> None:
    """s(.|u) and the multiplicity update of MDBV equal the enumerated pick law."""
    g = np.random.default_rng(7 + zeros)
    V, Kmax = 4, 3
    for _ in range(3):
        p, q = _rows(g, V, zeros=zeros, alpha=0.8)
        jmix = np.zeros(Kmax + 1)
        jmix[1:] = g.dirichlet(np.ones(Kmax))
        node = SelectionNode(p, q, jmix)
        laws = {n: _pick_law_bruteforce(node, q, n) for n in range(1, Kmax + 1)}
        s_full = np.zeros(V)
        idx = node.table.idx
        s_full[idx if idx is not None else slice(None)] = node.s_compact()
        assert s_full.sum() == pytest.approx(1.0, abs=1e-12)
        for v in range(V):
            s_v = sum(jmix[n] * pr for n in laws for (u, _), pr in laws[n].items() if u == v)
            assert s_full[v] == pytest.approx(s_v, abs=1e-12)
            if s_v <= 0.0:
                continue
            got_s, got_j = node.descend(v)
            assert got_s == pytest.approx(s_v, abs=1e-12)
            for m in range(Kmax + 1):
                want = sum(jmix[n] * laws[n].get((v, m), 0.0) for n in laws) / s_v
                assert got_j[m] == pytest.approx(want, abs=1e-12)


def test_selection_law_with_tied_ratios() -> None:
    """Tied ratios: the rank breaks ties by lower id, in sampling and in the closed form."""
    p = np.array([0.2, 0.2, 0.3, 0.3])
    q = np.array([0.1, 0.1, 0.4, 0.4])  # ratios 2, 2, 0.75, 0.75
    for jmix in (np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.5, 0.5])):
        node = SelectionNode(p, q, jmix)
        laws = {n: _pick_law_bruteforce(node, q, n) for n in (1, 2)}
        for v in range(4):
            s_v = sum(jmix[n] * pr for n in laws for (u, _), pr in laws[n].items() if u == v)
            assert node.s_compact()[v] == pytest.approx(s_v, abs=1e-12)
            assert node.descend(v)[0] == pytest.approx(s_v, abs=1e-12)


def test_bucketed_band_matches_direct_solve(monkeypatch) -> None:
    """Large supports take the bucket path (no sort); it must agree with solving all
    breakpoints directly, including tied ratios inside the band and at 1."""
    import localspec.verify.kseq as kseq

    g = np.random.default_rng(4)
    V = 6000
    q = np.full(V, 2.0**-14)
    p = q.copy()
    p[:400] *= 2.0  # dyadic values: a tie group at ratio exactly 2, one at exactly 1
    q[700:] = (1.0 - q[:700].sum()) * g.dirichlet(np.ones(V - 700))
    p[700:] = (1.0 - p[:700].sum()) * g.dirichlet(np.ones(V - 700))
    assert (p[:400] / q[:400] == 2.0).all() and (p[400:700] / q[400:700] == 1.0).all()
    jmix = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
    picks = [int(v) for v in g.choice(V, size=6, p=q)] + [0, 5, 450]
    big = SelectionNode(p, q, jmix)
    assert big.table.band.size > kseq._SMALL
    monkeypatch.setattr(kseq, "_SMALL", 10**9)
    direct = SelectionNode(p, q, jmix)
    np.testing.assert_allclose(big.rho, direct.rho, rtol=1e-13)
    np.testing.assert_allclose(big.s_compact(), direct.s_compact(), atol=1e-14)
    for v in picks:
        (s1, j1), (s2, j2) = big.descend(v), direct.descend(v)
        assert s1 == pytest.approx(s2, abs=1e-14) and s1 == pytest.approx(
            big.s_compact()[v], abs=1e-12
        )
        np.testing.assert_allclose(j1, j2, atol=1e-12)


def test_numpy_rng_adapter() -> None:
    a, b = NumpyRNG(3), NumpyRNG(np.random.default_rng(3))
    assert [a.flip(0.5) for _ in range(20)] == [b.flip(0.5) for _ in range(20)]
    assert NumpyRNG(0).flip(1.0) and not NumpyRNG(0).flip(0.0)
    rng = NumpyRNG(1)
    row = np.zeros(20_000, dtype=np.float32)  # the two-level path, zeros everywhere else
    row[[5, 1023, 1024, 19_999]] = [0.1, 0.2, 0.3, 0.4]
    draws = np.array([rng.choose(row) for _ in range(4000)])
    assert set(np.unique(draws)) <= {5, 1023, 1024, 19_999}
    freq = np.array([(draws == t).mean() for t in (5, 1023, 1024, 19_999)])
    assert np.abs(freq - [0.1, 0.2, 0.3, 0.4]).max() < 0.035  # > 4 sigma
    small = np.array([0.0, 2.0, 0.0, 6.0])  # unnormalised
    d2 = np.array([rng.choose(small) for _ in range(2000)])
    assert set(np.unique(d2)) == {1, 3} and abs((d2 == 3).mean() - 0.75) < 0.04


def _embed(a: np.ndarray, where: np.ndarray, V: int) -> np.ndarray:
    out = np.zeros(a.shape[:-1] + (V,))
    out[..., where] = a
    return out


@pytest.mark.parametrize("name", list(VERIFIERS))
def test_zero_padded_rows_give_the_same_law(name: str) -> None:
    """Rows over a larger vocabulary with zeros outside the support (the compaction code
    paths) decide exactly like the compact rows, token ids mapped."""
    g = np.random.default_rng(5)
    V, L, W = 3, 2, 40
    tgt, drf = E.dirichlet_model(V, L, g), E.dirichlet_model(V, L, g)
    where = np.sort(g.choice(W, size=V, replace=False))
    blocks = [(0, 2), (1, 1)]
    p = np.stack([E.block_rows(tgt, drf, b)[0] for b in blocks])
    q = np.stack([E.block_rows(tgt, drf, b)[1] for b in blocks])
    x = np.array(blocks)
    small = E.enumerate_outputs(VERIFIERS[name], p, q, x)
    big = E.enumerate_outputs(VERIFIERS[name], _embed(p, where, W), _embed(q, where, W), where[x])
    mapped = {(k, t, int(where[y])): pr for (k, t, y), pr in small.items()}
    assert mapped.keys() == big.keys()
    assert all(abs(mapped[z] - big[z]) < 1e-14 for z in big)


@pytest.mark.parametrize("name", list(VERIFIERS))
def test_float32_rows(name: str) -> None:
    """float32 input: the same law as float64 up to float32 rounding of the rows."""
    g = np.random.default_rng(9)
    V, L = 3, 2
    tgt, drf = E.dirichlet_model(V, L, g), E.dirichlet_model(V, L, g)
    blocks = [(1, 2), (1, 0)]
    p = np.stack([E.block_rows(tgt, drf, b)[0] for b in blocks])
    q = np.stack([E.block_rows(tgt, drf, b)[1] for b in blocks])
    x = np.array(blocks)
    a = E.enumerate_outputs(VERIFIERS[name], p, q, x)
    b = E.enumerate_outputs(VERIFIERS[name], p.astype(np.float32), q.astype(np.float32), x)
    for z in set(a) | set(b):
        assert abs(a.get(z, 0.0) - b.get(z, 0.0)) < 1e-5


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("truncate", [False, True])
def test_full_vocabulary_float32_calls(truncate: bool) -> None:
    """K=4, L=8 over 151,936 float32 entries: valid decisions, corrections in the support."""
    g = np.random.default_rng(2)
    K, L, V = 4, 8, 151_936
    base = g.standard_normal(V).astype(np.float32) * 3
    p = _softmax(base + g.standard_normal((K, L + 1, V)).astype(np.float32))
    q = _softmax(base + g.standard_normal((K, L, V)).astype(np.float32))
    if truncate:  # keep the 64 largest draft entries per row (plus the target's own)
        for arr in (p, q):
            cut = np.partition(arr, -64, axis=-1)[..., -64:-63]
            arr[arr < cut] = 0.0
            arr /= arr.sum(axis=-1, keepdims=True)
    x = np.stack([[int(NumpyRNG(k * 100 + i).choose(q[k, i])) for i in range(L)] for k in range(K)])
    for name, f in VERIFIERS.items():
        for seed in range(3):
            d = f(NumpyRNG(seed), p, q, x)
            assert 0 <= d.k < K and 0 <= d.tau <= L and 0 <= d.token < V, name
            if name in LOSSLESS:
                assert p[d.k, d.tau, d.token] > 0.0, name


def test_shape_errors_name_the_argument() -> None:
    p, q, x = np.zeros((2, 3, 4)), np.zeros((2, 2, 4)), np.zeros((2, 2), dtype=int)
    with pytest.raises(ValueError, match="q must be"):
        VERIFIERS["mdbv"](NumpyRNG(0), p, q[:, :1], x)
    with pytest.raises(ValueError, match="p must be"):
        VERIFIERS["gbv"](NumpyRNG(0), p[:, :2], q, x)
