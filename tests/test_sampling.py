"""Sampling transforms against hand-computed rows."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.config import SamplingConfig
from localspec.sampling import greedy_rows, sample_row, transform_row

LOGITS = np.log(np.array([0.05, 0.4, 0.3, 0.15, 0.1], dtype=np.float32))


def cfg(**kw) -> SamplingConfig:
    base = dict(temp=1.0, top_k=0, top_p=1.0, min_p=0.0)
    base.update(kw)
    return SamplingConfig(**base)


def test_greedy_is_one_hot_argmax():
    r = transform_row(LOGITS, cfg(temp=0.0))
    assert r.ids.tolist() == [1] and r.probs.tolist() == [1.0]
    assert greedy_rows(np.stack([LOGITS, LOGITS[::-1]])).tolist() == [1, 3]


def test_plain_softmax_recovers_probs():
    r = transform_row(LOGITS, cfg())
    np.testing.assert_allclose(r.dense(5), [0.05, 0.4, 0.3, 0.15, 0.1], atol=1e-6)


def test_temperature():
    r = transform_row(LOGITS, cfg(temp=0.5))
    p = np.array([0.05, 0.4, 0.3, 0.15, 0.1]) ** 2
    np.testing.assert_allclose(r.dense(5), p / p.sum(), atol=1e-6)


def test_top_k():
    r = transform_row(LOGITS, cfg(top_k=2))
    np.testing.assert_allclose(r.dense(5), [0, 0.4 / 0.7, 0.3 / 0.7, 0, 0], atol=1e-6)


def test_top_p_keeps_smallest_head_reaching_p():
    r = transform_row(LOGITS, cfg(top_p=0.8))  # 0.4 + 0.3 = 0.7 < 0.8 -> add 0.15
    np.testing.assert_allclose(r.dense(5), [0, 0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0], atol=1e-6)


def test_min_p():
    r = transform_row(LOGITS, cfg(min_p=0.3))  # threshold 0.12: keeps 0.4, 0.3, 0.15
    np.testing.assert_allclose(r.dense(5), [0, 0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0], atol=1e-6)


def test_combined_order_topk_minp_topp():
    r = transform_row(LOGITS, cfg(top_k=4, min_p=0.2, top_p=0.5))
    # top-4 then min-p (>= 0.08 of the renormalised max) keeps 4; top-p 0.5 keeps 0.4,0.3
    np.testing.assert_allclose(r.dense(5), [0, 0.4 / 0.7, 0.3 / 0.7, 0, 0], atol=1e-6)


def test_sampling_frequencies_follow_row():
    r = transform_row(LOGITS, cfg())
    g = np.random.default_rng(0)
    draws = np.bincount([sample_row(r, g) for _ in range(20000)], minlength=5) / 20000
    np.testing.assert_allclose(draws, [0.05, 0.4, 0.3, 0.15, 0.1], atol=0.015)


@pytest.mark.parametrize("n_allowed", [3, 40, 900])
def test_masked_row_equals_the_transform_of_the_masked_logits(n_allowed):
    """sampling.masked_row takes a subset path where few tokens are allowed: the same row as
    setting every refused logit to -inf and transforming, for every sampling setting."""
    from localspec.sampling import masked_row

    g = np.random.default_rng(n_allowed)
    V = 1000
    for cfg in (SamplingConfig(temp=0.7, top_k=40, top_p=0.95, min_p=0.05), SamplingConfig(temp=1.0, top_k=0, top_p=1.0, min_p=0.0),
                SamplingConfig(temp=0.3, top_k=5, top_p=0.5, min_p=0.2)):
        logits = g.normal(size=V).astype(np.float32)
        allowed = np.zeros(V, dtype=bool)
        allowed[g.choice(V, n_allowed, replace=False)] = True
        ref = logits.copy()
        ref[~allowed] = -np.inf
        want = transform_row(ref, cfg)
        live = want.probs > 0  # the refused tokens at probability 0 are not the row's support
        want = type(want)(want.ids[live], want.probs[live])
        got = masked_row(logits, cfg, allowed, np.empty(V, dtype=np.float32))
        assert got.ids.tolist() == want.ids.tolist() and np.allclose(got.probs, want.probs)
        assert allowed[got.ids].all()
