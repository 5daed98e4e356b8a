"""T > 0 on real models: the first two emitted tokens follow the target's exact law.

Each lossless method's empirical joint law of (token 1, token 2) over 1,200 generations is
compared with the target's exact law (computed from the target's own rows under the same
sampling transform) by a chi-square goodness-of-fit test. A deliberately biased verifier
(accept every draft token) must fail the same test, which shows the test has power.
"""

from __future__ import annotations

import pytest
from scipy.stats import chi2

from localspec import verify
from localspec.backend import Context
from localspec.config import GenConfig, SamplingConfig
from localspec.sampling import transform_row
from localspec.verify import Decision
from tests.support.helpers import session

pytestmark = [pytest.mark.slow, pytest.mark.law]  # ~7,000 generations: the long tier

PROMPT = "Write one word that describes the ocean."
SAMPLING = SamplingConfig(temp=1.0, top_k=6, top_p=1.0, min_p=0.0)
# 1,200 keeps every cell the test reads at >= 5 expected counts and took the long tier from
# ~16 to ~10 min; the biased rule is still rejected at 500 (below), and the exact law itself
# is proven by enumeration (tests/test_verify_exact.py)
N = 1200


def exact_law(sess) -> dict[tuple[int, int], float]:
    """P(t1, t2) from the target alone, same transform, one decode per first token."""
    m = sess.target_model
    toks = sess._prompt_tokens(sess.template.render([{"role": "user", "content": PROMPT}]))
    ctx = Context(m, n_ctx=512, n_batch=512, n_seq_max=1, threads=1)
    row = ctx.batch.clear().add_sequence(toks, 0, 0, True)
    ctx.decode()
    first = transform_row(ctx.logits(row), SAMPLING)
    law = {}
    for t1, p1 in zip(first.ids.tolist(), first.probs.tolist(), strict=True):
        r = ctx.batch.clear().add(t1, len(toks), 0, True)
        ctx.decode()
        second = transform_row(ctx.logits(r), SAMPLING)
        for t2, p2 in zip(second.ids.tolist(), second.probs.tolist(), strict=True):
            law[(t1, t2)] = p1 * p2
        ctx.seq_rm(0, len(toks), -1)
    return law


def sample_pairs(sess, method: str, K: int, n: int = N) -> list[tuple[int, ...]]:
    out = []
    for seed in range(n):
        cfg = GenConfig(method=method, K=K, L=2, n_predict=2, seed=seed, sampling=SAMPLING, dynamic_draft=False)
        list(sess.complete(PROMPT, cfg))
        out.append(tuple(sess.last_tokens[:2]))
    return out


def chi2_pvalue(pairs, law) -> float:
    """Pearson GOF on cells with expected count >= 5 (the rest pooled)."""
    counts: dict = {}
    for p in pairs:
        counts[p] = counts.get(p, 0) + 1
    big = {c: pr for c, pr in law.items() if pr * len(pairs) >= 5}
    obs = [counts.get(c, 0) for c in big]
    exp = [pr * len(pairs) for pr in big.values()]
    rest_o = len(pairs) - sum(obs)
    rest_e = len(pairs) - sum(exp)
    if rest_e >= 5:
        obs.append(rest_o)
        exp.append(rest_e)
    elif rest_o > 0 and rest_e < 1e-9:
        return 0.0
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True))
    return float(chi2.sf(stat, len(obs) - 1))


@pytest.fixture(scope="module")
def pair(smollm2_path, smollm2_q4_0_path):
    s = session(smollm2_path, smollm2_q4_0_path)
    return s, exact_law(s)


@pytest.mark.parametrize("method,K", [("sd", 1), ("gbv", 1), ("spectr", 2), ("mdbv", 2)])
def test_lossless_methods_match_target_law(pair, method, K):
    s, law = pair
    pairs = sample_pairs(s, method, K)
    assert all(len(p) == 2 for p in pairs)
    assert chi2_pvalue(pairs, law) > 1e-3


def test_biased_rule_is_detected(pair, monkeypatch):
    """Accepting every draft token samples the DRAFT's law: the test must reject it."""
    s, law = pair

    def accept_all(rng, p, q, x, greedy=None):
        L = x.shape[1]
        return Decision(0, L, int(rng.choose(p[0, L])))

    monkeypatch.setitem(verify.VERIFIERS, "sd", accept_all)
    pairs = sample_pairs(s, "sd", 1, n=500)  # the bias is gross: 500 samples reject it
    assert chi2_pvalue(pairs, law) < 1e-6


def sample_auto(s, K: int, note: str) -> list[tuple[int, ...]]:
    """N generations of two tokens with `auto` (K drafts, L <= 2) under the test's cost
    model; every turn must have chosen `note`. Clears the session's cost model after."""
    pairs = []
    try:
        for seed in range(N):
            cfg = GenConfig(method="auto", K=K, L=2, n_predict=2, seed=seed, sampling=SAMPLING)
            done = list(s.complete(PROMPT, cfg))[-1]
            assert done.stats.choice_note.startswith(note)
            pairs.append(tuple(s.last_tokens[:2]))
    finally:
        s.costs = None  # the module's other tests use the session without a cost model
    return pairs


def test_auto_with_a_data_dependent_draft_length_matches_target_law(pair, monkeypatch):
    """`auto` at T > 0: gbv with a draft length decided while drafting (here a p-min rule
    on the draft's real rows, so drafts of 1 and 2 tokens both occur) must still give the
    target's law -- the engine-level check of what the enumeration proves
    (tests/test_verify_exact.py::test_lossless_with_the_dynamic_draft_length)."""
    from tests.support.helpers import paying_cost_model_with_cutoff

    s, law = pair
    shapes = paying_cost_model_with_cutoff(s, monkeypatch, 0.6)
    pairs = sample_auto(s, K=1, note="gbv K=1 L<=2 dynamic")
    assert {(1,), (2,)} <= set(shapes)  # the rule did cut some drafts short
    assert chi2_pvalue(pairs, law) > 1e-3


def test_multi_draft_auto_with_per_draft_lengths_matches_target_law(pair, monkeypatch):
    """`auto` with K = 2 drafts at T > 0: each draft ends by its own path and the shorter one
    is verified padded with a token the target never emits (mdbv). Drafts of different
    lengths must occur in the same iteration, the padding must never be emitted, and the
    first two tokens must follow the target's law (the engine-level check of
    tests/test_verify_exact.py::test_per_draft_lengths_padded_with_an_impossible_token_stay_exact)."""
    from tests.support.helpers import paying_cost_model_with_cutoff

    s, law = pair
    shapes = paying_cost_model_with_cutoff(s, monkeypatch, 0.6)
    pairs = sample_auto(s, K=2, note="mdbv K=2 L<=2 dynamic per draft")
    assert any(len(set(sh)) > 1 for sh in shapes)  # drafts of 1 and 2 tokens side by side
    assert all(t >= 0 for p in pairs for t in p)
    assert chi2_pvalue(pairs, law) > 1e-3


# -- under a grammar: the law is the target's MASKED one (decode/constrained.py) -------------
REGEX = "(Deep|Vast|Blue|Calm|Wild|Salty|Endless|Dark|Big|Cold|The|It|A)[a-z ,]{1,12}\\."


def masked_exact_law(sess, spec) -> dict[tuple[int, int], float]:
    """P(t1, t2) of the target's rows masked by the grammar at each position, same transform."""
    import numpy as np

    from localspec.backend.grammar import eog_ids, ll_tokenizer
    from localspec.constrain import Constraint
    from localspec.sampling import masked_row

    m = sess.target_model
    matcher = Constraint(spec, ll_tokenizer(m), m.n_vocab, eog_ids(m)).matcher()
    buf = np.empty(m.n_vocab, dtype=np.float32)
    toks = sess._prompt_tokens(sess.template.render([{"role": "user", "content": PROMPT}]))
    ctx = Context(m, n_ctx=512, n_batch=512, n_seq_max=1, threads=1)
    row = ctx.batch.clear().add_sequence(toks, 0, 0, True)
    ctx.decode()
    first = masked_row(ctx.logits(row), SAMPLING, matcher.mask(), buf)
    law = {}
    for t1, p1 in zip(first.ids.tolist(), first.probs.tolist(), strict=True):
        r = ctx.batch.clear().add(t1, len(toks), 0, True)
        ctx.decode()
        matcher.consume([t1])
        second = masked_row(ctx.logits(r), SAMPLING, matcher.mask(), buf)
        matcher.rollback(1)
        for t2, p2 in zip(second.ids.tolist(), second.probs.tolist(), strict=True):
            law[(t1, t2)] = p1 * p2
        ctx.seq_rm(0, len(toks), -1)
    return law


@pytest.mark.parametrize("method,K", [("sd", 1), ("mdbv", 2)])
def test_constrained_methods_match_the_masked_target_law(pair, method, K):
    """T = 1 under a regex: the draft model samples its masked rows, the verifier reads the
    target's masked rows; the first two tokens follow the masked target's exact law."""
    from localspec.constrain import ConstraintSpec

    s, _ = pair
    spec = ConstraintSpec("regex", REGEX)
    law = masked_exact_law(s, spec)
    pairs = []
    for seed in range(N):
        cfg = GenConfig(method=method, K=K, L=2, n_predict=2, seed=seed, sampling=SAMPLING, dynamic_draft=False,
                        constraint=spec)
        list(s.complete(PROMPT, cfg))
        pairs.append(tuple(s.last_tokens[:2]))
    assert chi2_pvalue(pairs, law) > 1e-3
    assert chi2_pvalue(pairs, pair[1]) < 1e-6  # and not the unmasked law: the mask mattered
