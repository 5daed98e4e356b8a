"""Speculative engine on real models: greedy equality, exact evaluation counts, KV invariant."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.backend import Context
from localspec.config import GenConfig, SamplingConfig
from localspec.errors import ConfigError
from localspec.events import Accepted, Done, Drafted, Written
from tests.support.helpers import model, session

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "List the planets of the solar system.",
    "Explain what a hash table is in two sentences.",
]
METHODS = ["sd", "gbv", "spectr", "spectr-gbv", "mdbv"]


def gen(sess, prompt, **kw):
    events = list(sess.complete(prompt, GenConfig(**kw)))
    assert isinstance(events[-1], Done)
    return events


def trie_nodes(drafts) -> int:
    return len({tuple(d[:i]) for d in drafts for i in range(1, len(d) + 1)})


@pytest.fixture(scope="module")
def same_pair(smollm2_path):
    return session(smollm2_path, smollm2_path)


def first_divergence_gap(sess, target_path, ar: list[int], sp: list[int], prompt_toks: list[int]) -> float | None:
    """Logit gap (fresh evaluation) between the two tokens at the first divergence, if any."""
    i = next((j for j in range(min(len(ar), len(sp))) if ar[j] != sp[j]), None)
    if i is None:
        return None
    ctx = Context(model(target_path), n_ctx=2048, n_batch=512, n_seq_max=1, threads=1)
    row = ctx.batch.clear().add_sequence(prompt_toks + ar[:i], 0, 0, True)
    ctx.decode()
    lg = ctx.logits(row)
    return abs(float(lg[ar[i]] - lg[sp[i]]))


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
@pytest.mark.parametrize("method", METHODS)
def test_greedy_same_model_equals_ar(same_pair, smollm2_path, method):
    """K = 1 and K = 2 identical greedy drafts: the text equals AR's (the near-tie rule is
    kept for K = 2 in case the batch shapes differ)."""
    L = 6
    K = 1 if method in ("sd", "gbv") else 2
    for prompt in PROMPTS:
        ar = gen(same_pair, prompt, method="ar", n_predict=48)[-1]
        ar_toks, prompt_toks = list(same_pair.last_tokens), list(same_pair.last_prompt_tokens)
        ev = gen(same_pair, prompt, method=method, K=K, L=L, n_predict=48, dynamic_draft=False)
        done = ev[-1]
        if K == 1:
            assert done.text == ar.text, (method, prompt)
        else:
            gap = first_divergence_gap(same_pair, smollm2_path, ar_toks, list(same_pair.last_tokens), prompt_toks)
            assert gap is None or gap < 1.0, (method, prompt, gap)
        visible = "".join(e.text for e in ev if isinstance(e, Accepted | Written))
        assert visible == done.text
        # identical models: nearly every draft token is accepted
        full = [t for t in done.stats.accepted_lengths[:-1]]  # the last block may be cut by -n
        assert np.mean(full) + 1 >= 0.8 * (L + 1), done.stats.accepted_lengths


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_greedy_different_draft_equals_ar(smollm2_path, smollm2_q4_0_path):
    """A Q4_0 draft disagrees often; the output must still be the target's greedy text.

    Batch-size numerics (docs/design.md#numerics) could in principle flip a near-tied argmax between the
    batched verification and AR's one-token decode; on these prompts they do not.
    """
    s = session(smollm2_path, smollm2_q4_0_path)
    rejections = 0
    for prompt in PROMPTS:
        ar = gen(s, prompt, method="ar", n_predict=48)[-1]
        for method in ("sd", "mdbv"):
            done = gen(s, prompt, method=method, K=1, L=5, n_predict=48)[-1]
            assert done.text == ar.text, (method, prompt)
            rejections += sum(t < 5 for t in done.stats.accepted_lengths)
    assert rejections > 0  # the test exercised corrections, not only full acceptance


def test_each_token_evaluated_once(smollm2_path, smollm2_q4_0_path):
    """Target evaluations = prompt + per iteration (pending token + trie nodes): accepted
    tokens are never evaluated again; drafts sharing a prefix share its evaluation."""
    s = session(smollm2_path, smollm2_q4_0_path)
    t0 = s.target.ctx.n_evaluated
    ev = gen(s, PROMPTS[0], method="mdbv", K=3, L=4, n_predict=60, seed=3, draft_temp=1.0, dynamic_draft=False)
    done = ev[-1]
    drafted = [e for e in ev if isinstance(e, Drafted)]
    expected = done.stats.prompt_evaluated + sum(1 + trie_nodes(d.drafts) for d in drafted)
    assert s.target.ctx.n_evaluated - t0 == expected
    assert any(trie_nodes(d.drafts) < 3 * 4 for d in drafted)  # some prefixes were shared
    assert s.target.ctx.pos_max(0) + 1 == len(s.target.tokens)
    assert s.draft.ctx.pos_max(0) + 1 == len(s.draft.tokens)
    assert s.draft.ctx.n_evaluated < s.target.ctx.n_evaluated


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_kv_invariant_after_20_iterations(smollm2_path, smollm2_q4_0_path):
    s = session(smollm2_path, smollm2_q4_0_path)
    done = gen(s, "Write a long story about a dragon.", method="gbv", K=1, L=4, n_predict=400,
               sampling=SamplingConfig(temp=0.8), seed=1)[-1]
    assert done.stats.iterations >= 20
    toks = s.target.committed
    m = model(smollm2_path)
    fresh = Context(m, n_ctx=2048, n_batch=512, n_seq_max=1, threads=1)
    for i in range(0, len(toks) - 1, 512):
        fresh.batch.clear().add_sequence(toks[i : min(i + 512, len(toks) - 1)], i, 0, False)
        fresh.decode()
    r1 = fresh.batch.clear().add_sequence(toks[-1:], len(toks) - 1, 0, True)
    fresh.decode()
    kept = s.target.ctx
    r2 = kept.batch.clear().add_sequence(toks[-1:], len(toks) - 1, 0, True)
    kept.decode()
    a, b = fresh.logits(r1), kept.logits(r2)
    assert np.argmax(a) == np.argmax(b)
    assert np.abs(a - b).max() <= 1.0


def _fresh_last_logits(path, toks: list[int]) -> np.ndarray:
    fresh = Context(model(path), n_ctx=2048, n_batch=512, n_seq_max=1, threads=1)
    for i in range(0, len(toks) - 1, 512):
        fresh.batch.clear().add_sequence(toks[i : min(i + 512, len(toks) - 1)], i, 0, False)
        fresh.decode()
    r = fresh.batch.clear().add_sequence(toks[-1:], len(toks) - 1, 0, True)
    fresh.decode()
    return fresh.logits(r).copy()


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_kv_invariant_with_per_draft_lengths(smollm2_path, smollm2_q4_0_path, monkeypatch):
    """K = 3 sampled drafts that each end on their own (auto at T > 0): a draft's last tokens
    are often not in the draft's KV while its siblings' are. After 20+ iterations both
    caches still equal a fresh evaluation of what they hold, and every committed token was
    evaluated once by each model."""
    from tests.support.helpers import paying_cost_model_with_cutoff

    s = session(smollm2_path, smollm2_q4_0_path)
    shapes = paying_cost_model_with_cutoff(s, monkeypatch, 0.5)
    done = gen(s, "Write a long story about a dragon.", method="auto", K=3, L=6, auto_L=False,
               n_predict=300, sampling=SamplingConfig(temp=0.8), seed=3)[-1]
    assert "per draft" in done.stats.choice_note and done.stats.iterations >= 20
    # every decision recorded its predicted speedup; the first one is what the note says
    speedup, tokens, seconds = done.stats.predicted[0]
    assert len(done.stats.predicted) >= 2 and speedup > 1.0 and tokens > 1.0 and seconds > 0.0
    assert sum(len(set(sh)) > 1 for sh in shapes) >= 5  # uneven drafts, many times
    for st, path in ((s.target, smollm2_path), (s.draft, smollm2_q4_0_path)):
        toks = st.committed
        n = len(st.tokens)  # evaluated and kept; pending tokens are evaluated next
        kept = st.ctx
        assert kept.pos_max(0) == n - 1
        if st.pending:
            r = kept.batch.clear().add_sequence(st.pending, n, 0, True)
            kept.decode()
            st.tokens.extend(st.pending)
            st.pending = []
        else:
            r = kept.batch.clear().add_sequence(toks[-1:], n - 1, 0, True)
            kept.seq_rm(0, n - 1, -1)
            kept.decode()
        a, b = _fresh_last_logits(path, toks), kept.logits(r)
        assert np.argmax(a) == np.argmax(b)
        assert np.abs(a - b).max() <= 1.0


def test_commit_keeps_only_the_accepted_drafts_evaluated_prefix() -> None:
    """Per-draft lengths: draft 0 ended at depth 2 without decoding its last token while
    draft 1 went on (the draft decoded depth 2 for draft 1 only). Accepting all of draft 0
    must copy one cell, not two, and leave its last token pending for the next decode."""
    from types import SimpleNamespace

    from localspec.decode.drafters.model import commit_draft
    from localspec.decode.drafters.trie import DraftTrie, Node
    from localspec.decode.state import KVState

    calls: list[tuple] = []
    ctx = SimpleNamespace(n_seq_max=3, seq_cp=lambda *a: calls.append(("cp", *a)),
                          seq_rm=lambda *a: calls.append(("rm", *a)))
    dft = KVState(ctx)
    dft.tokens, dft.pending = [1, 2, 3], [4]
    root = Node(10, 1, [0, 1], -1, evaluated=True)
    a2 = Node(11, 2, [0], 0, evaluated=False)  # draft 0 stopped: its last token never decoded
    b2 = Node(12, 2, [1], 0, evaluated=True)
    b3 = Node(13, 3, [1], 2, evaluated=False)
    trie = DraftTrie(K=2, nodes=[root, a2, b2, b3], path=[[0, 1], [0, 2, 3]], evaluated_depth=2)
    assert trie.L == 3 and trie.tokens().tolist() == [[10, 11, -1], [10, 12, 13]]
    commit_draft(dft, trie, k=0, tau=2, correction=99)
    assert ("cp", 1, 0, 4, 5) in calls  # one cell (depth 1) becomes the main sequence's
    assert dft.tokens == [1, 2, 3, 4, 10] and dft.pending == [11, 99]


def test_multi_turn_keeps_both_caches(smollm2_path, smollm2_q4_0_path):
    s = session(smollm2_path, smollm2_q4_0_path)
    cfg = GenConfig(method="sd", K=1, L=4, n_predict=24)
    list(s.chat("What is 2+2?", cfg))
    d_before = s.draft.ctx.n_evaluated
    d2 = list(s.chat("And 3+3?", cfg))[-1]
    assert d2.stats.prompt_evaluated < 20
    assert s.draft.ctx.n_evaluated - d_before < 20 + d2.stats.iterations * 8


def test_bad_k_and_l_name_the_flag(smollm2_path):
    s = session(smollm2_path, smollm2_path, n_batch=32)
    with pytest.raises(ConfigError, match="-K/--drafts"):
        gen(s, "hi", method="mdbv", K=20, L=2)
    with pytest.raises(ConfigError, match="-L/--draft-len"):
        gen(s, "hi", method="mdbv", K=4, L=10)


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_greedy_multi_draft_divergence_only_at_near_ties(smollm2_path, smollm2_q4_0_path):
    """K=2 sampled drafts at T=0: the text is the target's greedy text up to batch numerics.

    A target row computed inside a verification batch differs from AR's one-token decode by
    up to ~1 logit on CPU (different matmul kernels, docs/design.md#numerics). Where two candidates are
    that close, greedy AR and greedy speculation may pick differently; anywhere else they
    must agree. So: at the first divergence (if any), the two tokens' logits under a fresh
    evaluation of the common prefix must be within 1.0 of each other.
    """
    s = session(smollm2_path, smollm2_q4_0_path)
    checked = 0
    for prompt in PROMPTS:
        gen(s, prompt, method="ar", n_predict=64)
        ar, prompt_toks = list(s.last_tokens), list(s.last_prompt_tokens)
        gen(s, prompt, method="mdbv", K=2, L=4, n_predict=64, draft_temp=0.8, seed=0)
        gap = first_divergence_gap(s, smollm2_path, ar, list(s.last_tokens), prompt_toks)
        if gap is None:
            continue
        assert gap < 1.0, (prompt, gap)
        checked += 1
    print(f"divergences at near-ties: {checked}/{len(PROMPTS)} prompts")


def test_auto_falls_back_to_ar_when_speculation_cannot_pay(smollm2_path, smollm2_q4_0_path):
    """A draft as expensive as the target can never pay: auto must run plain decoding."""
    s = session(smollm2_path, smollm2_q4_0_path)
    cfg = GenConfig(method="auto", n_predict=24, auto_K=True, auto_L=True)
    table = s.explain(cfg)
    assert "choice: ar" in table and "sd" in table
    done = gen(s, PROMPTS[1], method="auto", n_predict=24, auto_K=True, auto_L=True)[-1]
    assert done.stats.choice_note.startswith("ar") and done.stats.ar_estimate > 0
    assert done.stats.predicted and {p[:2] for p in done.stats.predicted} == {(1.0, 1.0)}  # AR promised AR's speed
    ar = gen(s, PROMPTS[1], method="ar", n_predict=24)[-1]
    assert done.text == ar.text


def test_greedy_draft_stops_at_low_confidence(smollm2_q4_0_path):
    """A greedy draft row is one-hot; the cut-off must still see the model's real confidence.

    Without that, `auto`'s dynamic draft length never triggered at T = 0 (every row had
    top probability 1) and every greedy iteration drafted the full L.
    """
    import math

    from localspec.decode.drafters.model import _Confidence, propose
    from localspec.decode.state import KVState
    from localspec.sampling import transform_row
    from tests.support.helpers import FixedCutoff

    greedy = SamplingConfig(temp=0.0)
    lg = np.array([2.0, 0.0, math.log(3.0) + 0.0, -50.0], dtype=np.float32)  # p = e^2/(e^2+1+3)
    conf = _Confidence(greedy, True)
    assert conf(lg, transform_row(lg, greedy)) == pytest.approx(math.exp(2) / (math.exp(2) + 4), rel=1e-6)
    assert _Confidence(greedy, False)(lg, transform_row(lg, greedy)) == 1.0  # no cut-off: row value

    # the cut (only logits within CUT of the top exponentiated) against the full softmax: a
    # row whose tail is all just below the cut bounds the error; a flat row is exact
    rng = np.random.default_rng(0)
    for row in (rng.normal(0.0, 3.0, 151_936).astype(np.float32),
                np.concatenate([[25.0], np.full(151_935, 25.0 - _Confidence.CUT - 1e-3)]).astype(np.float32),
                np.zeros(1000, dtype=np.float32)):
        full = 1.0 / np.exp(row.astype(np.float64) - row.max()).sum()
        assert conf(row, transform_row(row, greedy)) == pytest.approx(full, rel=4e-4)
    peaked = rng.normal(0.0, 3.0, 151_936).astype(np.float32)
    peaked[7] = 40.0  # a confident row: most of the vocabulary is far below the top
    full = 1.0 / np.exp(peaked.astype(np.float64) - 40.0).sum()
    assert conf(peaked, transform_row(peaked, greedy)) == pytest.approx(full, rel=1e-6)

    ctx = Context(model(smollm2_q4_0_path), n_ctx=512, n_batch=64, n_seq_max=2, threads=1)
    toks = model(smollm2_q4_0_path).tokenize("The list of the ten best", add_special=True)
    lengths = {}
    confs = {}
    for p_min in (None, 0.999999):
        ctx.seq_rm(0, 0, -1)
        st = KVState(ctx)
        st.sync(toks)
        trie = propose(st, 1, 12, greedy, np.random.default_rng(0), None if p_min is None else FixedCutoff(p_min))
        lengths[p_min], confs[p_min] = trie.L, trie.conf[0]
        st.drop_drafts()
    assert lengths[None] == 12
    assert 1 <= lengths[0.999999] < 12
    assert all(c < 1.0 for c in confs[0.999999][1:])  # real confidences were recorded


def test_draft_stop_weighs_the_whole_path_not_the_last_token(smollm2_q4_0_path):
    """The dynamic length multiplies acceptance chances along the draft: a run of tokens that
    are each fairly likely stops once their product is too small to pay, even though every
    single one would pass a per-token cut-off at the same level."""
    from localspec.decode.drafters.model import propose
    from localspec.decode.state import KVState

    class ProductStop:
        def __init__(self) -> None:
            self.seen: list[tuple[int, float]] = []

        def accept_prob(self, conf: float) -> float:
            return 0.8  # every token: 80 %

        def worth(self, depth: int, p: float) -> bool:
            self.seen.append((depth, p))
            return p > 0.5  # 0.8^3 = 0.51 passes, 0.8^4 = 0.41 does not

    ctx = Context(model(smollm2_q4_0_path), n_ctx=512, n_batch=64, n_seq_max=2, threads=1)
    st = KVState(ctx)
    st.sync(model(smollm2_q4_0_path).tokenize("The list of the ten best", add_special=True))
    stop = ProductStop()
    evals = ctx.n_decodes
    trie = propose(st, 1, 12, SamplingConfig(temp=0.0), np.random.default_rng(0), stop)
    assert trie.L == 3
    # the 3rd token is drafted but not decoded: a 4th could not pay whatever its confidence
    assert trie.evaluated_depth == 2 and ctx.n_decodes - evals == 3
    # each depth is asked twice: before the decode (best case) and after it (its real row)
    assert [d for d, _ in stop.seen] == [2, 2, 3, 3, 4]
    assert stop.seen[-1][1] == pytest.approx(0.8**4)


def test_the_draft_models_prompt_is_prompt_time(same_pair, monkeypatch):
    """A method that drafts with the draft model from its first iteration evaluates the
    draft's copy of the prompt before that iteration, on the prompt's clock (llama.cpp's
    speculative example counts its draft's prompt there too: bench speed compares the same
    span). The first draft then has no prompt left to catch up; the answer is unchanged."""
    from localspec.decode import turn as turn_mod
    from localspec.decode.drafters import model as drafter_mod

    prompt = "Here is a list of fruits: apple, banana, cherry, date, elderberry, fig, grape. " * 6
    ar = gen(same_pair, prompt, method="ar", n_predict=16)[-1]
    same_pair.reset()  # the draft's KV holds nothing of this prompt
    seen: dict[str, int] = {}
    behind_at_first_draft: list[int] = []
    prefill = turn_mod.Turn.prefill_draft

    def spy_prefill(self, drafter):
        seen["behind"] = len(self.target.committed) - len(drafter.draft.tokens)
        before = self.stats.prompt_seconds
        prefill(self, drafter)
        seen["prompt_grew"] = int(self.stats.prompt_seconds > before)

    real_propose = drafter_mod.propose

    def spy_propose(dft, *a, **kw):
        if not behind_at_first_draft:
            behind_at_first_draft.append(len(dft.pending))
        return real_propose(dft, *a, **kw)

    monkeypatch.setattr(turn_mod.Turn, "prefill_draft", spy_prefill)
    monkeypatch.setattr(drafter_mod, "propose", spy_propose)
    done = gen(same_pair, prompt, method="sd", K=1, L=4, n_predict=16)[-1]
    assert seen["behind"] > 100 and seen["prompt_grew"] == 1  # the whole prompt, on the prompt's clock
    assert behind_at_first_draft == [1]  # the first draft evaluates only the last committed token
    assert done.text == ar.text
