"""SpecTr-GBV as published: the bias finding (docs/algorithms.md#spectr-gbv-bias) and Algorithm 2 for K = 1.

These tests pin the finding so a silent change is caught: for K >= 2 the per-step law gives
some prefixes more probability than the target allows (no later correction can repair that);
for K = 1 the per-step law is biased but completable, and the cross-iteration correction
(SpectrGbvCarry) makes whole generations exact -- at fewer tokens per target call than GBV.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from localspec.verify import VERIFIERS, Decision
from tests.support import exact as E
from tests.support.algorithm2 import SpectrGbvCarry

TOY_T, TOY_D = E.const_model([1 / 3, 2 / 3]), E.const_model([2 / 3, 1 / 3])


def _law(tgt, drf, V, L, K):
    return E.step_law(VERIFIERS["spectr-gbv"], tgt, drf, V, L, K)


def test_toy_regression_and_excess() -> None:
    l2, l3 = _law(TOY_T, TOY_D, 2, 2, 2), _law(TOY_T, TOY_D, 2, 2, 3)
    assert E.expected_tau(l2) == pytest.approx(1.403435, abs=1e-6)
    assert E.expected_tau(l3) == pytest.approx(1.499542, abs=1e-6)
    assert E.completability_excess(l2, TOY_T, 2, 2) == pytest.approx(0.0238, abs=5e-4)
    assert E.completability_excess(l3, TOY_T, 2, 2) > 0.01


RANDOM_K2 = [
    (V, L, K, s) for (V, L, K) in [(2, 2, 2), (3, 1, 2), (2, 3, 2), (2, 2, 3)] for s in range(4)
]


def test_not_lossless_for_k_ge_2_on_random_models() -> None:
    """Completability excess > 0 on every random K >= 2 case (up to about +0.10)."""
    excess = []
    for V, L, K, s in RANDOM_K2:
        g = np.random.default_rng(s)
        tgt, drf = E.dirichlet_model(V, L, g), E.dirichlet_model(V, L, g)
        lw = _law(tgt, drf, V, L, K)
        assert abs(sum(lw.values()) - 1.0) < 1e-12
        excess.append(E.completability_excess(lw, tgt, V, L))
        print(f"spectr-gbv V={V} L={L} K={K} seed={s}: completability excess {excess[-1]:+.4f}")
    assert min(excess) > 1e-3
    assert max(excess) > 0.09


def test_k1_step_is_biased_but_completable() -> None:
    """K = 1: one step alone is not the target's law, yet never over-covers a prefix (so the
    cross-iteration correction can finish the job)."""
    g = np.random.default_rng(3)
    for tgt, drf, V, L in [
        (TOY_T, TOY_D, 2, 2),
        (E.dirichlet_model(3, 2, g), E.dirichlet_model(3, 2, g), 3, 2),
    ]:
        lw = _law(tgt, drf, V, L, 1)
        assert E.strict_error(lw, tgt, V, L) > 1e-3
        assert E.completability_excess(lw, tgt, V, L) < 1e-12


# -- whole generations -----------------------------------------------------------------------
def generation_law(name: str, tgt, drf, V: int, L: int, N: int, carry: SpectrGbvCarry | None):
    """Exact law of the first N generated tokens (K = 1, iterations chained, every draft and
    random branch enumerated) and the expected number of target calls to produce them."""
    frontier = {((), ()): [1.0, 0.0, carry]}
    final: dict[tuple[int, ...], float] = {}
    calls = 0.0
    while frontier:
        nxt: dict = {}
        for (ctx, _), (pr, cm, c) in frontier.items():
            if len(ctx) >= N:
                final[ctx[:N]] = final.get(ctx[:N], 0.0) + pr
                calls += cm
                continue
            for block in itertools.product(range(V), repeat=L):
                w = E.joint(drf, block, start=ctx)
                if w == 0.0:
                    continue
                p, q = E.block_rows(tgt, drf, block, start=ctx)
                p, q, x = p[None], q[None], np.array([block])
                c1 = c.clone() if c is not None else None
                p_eff = c1.adjust(p, q, x) if c1 is not None else p
                for (k, tau, y), pd in E.enumerate_outputs(VERIFIERS[name], p_eff, q, x).items():
                    c2 = None
                    if c1 is not None:
                        c2 = c1.clone()
                        c2.commit(Decision(k, tau, y))
                    ctx2 = ctx + block[:tau] + (y,)
                    spans = tuple((s.remaining, s.P, s.Q) for s in c2.spans) if c2 else ()
                    e = nxt.setdefault((ctx2, spans), [0.0, 0.0, c2])
                    e[0] += pr * w * pd
                    e[1] += (cm + pr) * w * pd  # probability-weighted count of target calls
        frontier = nxt
    err = max(
        abs(final.get(y, 0.0) - E.joint(tgt, y)) for y in itertools.product(range(V), repeat=N)
    )
    return err, calls


def _gen_models(seed: int, V: int, L: int, N: int):
    if seed < 0:
        return TOY_T, TOY_D
    g = np.random.default_rng(seed)
    return E.dirichlet_model(V, N + L, g), E.dirichlet_model(V, N + L, g)


@pytest.mark.parametrize(
    "seed,L,N",
    [(-1, 2, 8), (0, 2, 8), (1, 2, 6), (2, 3, 7)],
    ids=["toy-L2-N8", "s0-L2-N8", "s1-L2-N6", "s2-L3-N7"],
)
def test_k1_with_algorithm2_is_exact_over_generations(seed: int, L: int, N: int) -> None:
    V = 2
    tgt, drf = _gen_models(seed, V, L, N)
    err, calls = generation_law("spectr-gbv", tgt, drf, V, L, N, SpectrGbvCarry())
    err_plain, _ = generation_law("spectr-gbv", tgt, drf, V, L, N, None)
    err_gbv, calls_gbv = generation_law("gbv", tgt, drf, V, L, N, None)
    print(
        f"\n{seed=} {L=} {N=}: tokens/call spectr-gbv+alg2 {N / calls:.4f}, gbv {N / calls_gbv:.4f}"
    )
    assert err < 1e-10  # exact with the correction ...
    assert err_plain > 1e-3  # ... and biased without it
    assert err_gbv < 1e-10
    assert calls > calls_gbv  # the finding: more target calls (fewer tokens per call) than GBV


def test_carry_protocol_errors() -> None:
    carry = SpectrGbvCarry()
    with pytest.raises(RuntimeError):
        carry.commit(Decision(0, 0, 0))
    p = np.full((1, 4, 2), 0.5)
    q = np.full((1, 3, 2), 0.5)
    x = np.zeros((1, 3), dtype=int)
    assert carry.adjust(p, q, x) is p  # nothing active: rows untouched, no copy
    carry.commit(Decision(0, 0, 1))  # early stop opens a span over the rest of the block
    assert [s.remaining for s in carry.spans] == [2]
    with pytest.raises(ValueError):
        carry.adjust(p[:, :2], q[:, :1], x[:, :1])  # L shrank inside a span
    carry.reset()
    assert carry.spans == []
