"""The target's log-probabilities of emitted and prompt tokens, on SmolLM2 (target Q4_1,
draft Q4_0: a draft that gets rejections, so corrections and bonus tokens both occur).

Greedy: every method emits AR's tokens, and each token's log-probability must be AR's too
(read from the verify pass's rows, not from an extra decode). The numbers are checked
against a log-softmax computed here from a separate context's logits, one token per decode
as AR runs; prompt scoring against a pass with logits at every position in the same chunks,
and a prompt scored after a shared prefix was cached must get what a fresh pass gets
(llama.cpp's numbers depend on a batch's shape: ~0.1 nat apart on this model, so reuse is
only right when the shapes are the same).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from localspec.backend import Context
from localspec.config import GenConfig, SamplingConfig
from localspec.constrain import ConstraintSpec
from localspec.decode.state import SCORE_CHUNK
from localspec.errors import ConfigError
from localspec.events import Accepted, Done, PromptLogprobs, TokenLogprob, Written
from tests.support.helpers import session

ASK = [{"role": "user", "content": "List three facts about the moon, one per line."}]
TOL = 1e-4  # nats (measured: identical on this pair; a verify pass is a small batch)


def greedy(method: str, **kw) -> GenConfig:
    return GenConfig(method=method, n_predict=kw.pop("n_predict", 40), sampling=SamplingConfig(temp=0.0),
                     logprobs=kw.pop("logprobs", 3), **kw)


def entries(events: list) -> list[TokenLogprob]:
    return [e for ev in events if isinstance(ev, Accepted | Written) for e in ev.logprobs]


@pytest.fixture(scope="module")
def smol(smollm2_path, smollm2_q4_0_path):
    s = session(smollm2_path, smollm2_q4_0_path)
    ref = list(s.generate(ASK, greedy("ar")))
    return s, ref


def log_softmax(row: np.ndarray) -> np.ndarray:
    x = row.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def direct_rows(sess, tokens: list[int], chunk: int = SCORE_CHUNK, first: int = 0) -> np.ndarray:
    """Log-softmax rows of a fresh context's pass over `tokens` in chunks of `chunk`
    positions, logits at every position from `first` on (earlier ones: no logits)."""
    ctx = Context(sess.target_model, n_ctx=1024, n_batch=512, n_seq_max=1, threads=1)
    if first:
        ctx.batch.clear().add_sequence(tokens[:first], 0, 0, False)
        ctx.decode()
    out = []
    for a in range(first, len(tokens), chunk):
        b = ctx.batch.clear()
        for i, t in enumerate(tokens[a : a + chunk]):
            b.add(t, a + i, 0, True)
        ctx.decode()
        out += [log_softmax(r) for r in ctx.logits_all()]
    ctx.close()
    return np.stack(out)


def test_ar_entries_are_the_targets_log_softmax(smol):
    s, ref = smol
    got = entries(ref)
    toks = s.last_tokens
    assert [e.token for e in got] == toks and len(toks) > 10
    n = len(s.last_prompt_tokens)
    rows = direct_rows(s, s.last_prompt_tokens + toks[:-1], chunk=1, first=n - 1)  # AR: a token per decode
    for e, row in zip(got, rows, strict=True):
        assert e.logprob == pytest.approx(row[e.token], abs=TOL)
        assert [t for t, _, _ in e.top] == list(np.argsort(-row, kind="stable")[:3])
        assert e.piece == s.target_model.piece(e.token)
    text = b"".join(e.piece for e in got).decode()
    assert text == ref[-1].text


def test_entries_are_well_formed(smol):
    _, ref = smol
    for e in entries(ref):
        assert e.logprob is not None and e.logprob <= 0
        lps = [lp for _, _, lp in e.top]
        assert len(lps) == 3 and lps == sorted(lps, reverse=True)
        assert lps[0] >= e.logprob  # greedy: the chosen token IS the most likely one
        assert e.top[0][0] == e.token and lps[0] == e.logprob
        assert sum(math.exp(lp) for lp in lps) <= 1 + 1e-6


# A trie whose drafts differ (a stack of a lookup and the model; sampled alternatives) is
# scored in a batch of branches, and llama.cpp's numbers then move (flash attention's tiles
# over masked cells): measured up to 0.17 nat on this pair, with the same tokens. Unbranched
# tries give AR's numbers exactly. The row read is checked either way: greedy, the chosen
# token must be its argmax.
BRANCHED = 0.3


@pytest.mark.parametrize("method,K,spec_type,draft_temp,tol", [
    ("sd", 1, None, None, TOL), ("gbv", 1, None, None, TOL), ("mdbv", 2, None, None, TOL),
    ("spectr", 2, None, None, TOL), ("auto", 1, None, None, TOL), ("sd", 1, ("ngram",), None, TOL),
    ("gbv", 1, ("suffix",), None, TOL), ("sd", 1, ("ngram+draft",), None, BRANCHED),
    ("mdbv", 3, None, 1.0, BRANCHED),
])
def test_every_method_gives_ars_logprobs(smol, method, K, spec_type, draft_temp, tol):
    s, ref = smol
    events = list(s.generate(ASK, greedy(method, K=K, L=5, spec_type=spec_type, draft_temp=draft_temp)))
    assert events[-1].text == ref[-1].text
    got, want = entries(events), entries(ref)
    assert [e.token for e in got] == [e.token for e in want]
    for g, w in zip(got, want, strict=True):
        assert g.logprob == pytest.approx(w.logprob, abs=tol)
        assert g.top[0][0] == g.token
    if method != "auto":  # auto may run AR while its cost model is untimed
        assert events[-1].stats.target_calls < len(got)  # the rows came from verify passes


def test_under_a_constraint_the_raw_logprobs_of_ar(smol):
    s, _ = smol
    spec = ConstraintSpec("regex", "(yes|no|maybe), [a-z ]{1,30}\\.")
    ar = list(s.generate(ASK, greedy("ar", constraint=spec)))
    sd = list(s.generate(ASK, greedy("sd", L=4, constraint=spec)))
    assert sd[-1].text == ar[-1].text
    got, want = entries(sd), entries(ar)
    assert len(got) == len(want) > 3
    for g, w in zip(got, want, strict=True):
        assert g.token == w.token and g.logprob == pytest.approx(w.logprob, abs=TOL)
    # raw distribution: the grammar's mask is not applied, so the alternatives need not be allowed
    assert any(e.top[0][0] != e.token for e in got)


def test_off_unless_asked(smol):
    s, _ = smol
    events = list(s.generate(ASK, greedy("sd", L=4, logprobs=None, n_predict=12)))
    assert not entries(events) and not any(isinstance(ev, PromptLogprobs) for ev in events)
    got = entries(list(s.generate(ASK, greedy("sd", L=4, logprobs=0, n_predict=12))))
    assert got and all(e.top == () for e in got)


def test_sampled_tokens_get_their_raw_logprob(smol):
    s, _ = smol
    cfg = GenConfig(method="sd", L=4, n_predict=20, seed=5, logprobs=1,
                    sampling=SamplingConfig(temp=1.3, top_k=0, top_p=1.0, min_p=0.0))
    events = list(s.generate(ASK, cfg))
    got = entries(events)
    assert [e.token for e in got] == s.last_tokens
    assert all(e.logprob <= e.top[0][2] for e in got)
    assert any(e.logprob < e.top[0][2] for e in got)  # sampled: not always the argmax


def test_parse_refuses_clearly(smol):
    s, _ = smol
    with pytest.raises(ConfigError, match="parse does not return log-probabilities"):
        s.generate(ASK, greedy("parse"))


def score(s, toks: list[int], n_top: int = 2):
    events = list(s.generate(toks, GenConfig(method="ar", n_predict=0, prompt_logprobs=n_top)))
    assert isinstance(events[0], PromptLogprobs) and isinstance(events[-1], Done)
    assert events[-1].stats.n_tokens == 0 and events[-1].text == ""
    return events[0].entries, events[-1].stats.prompt_evaluated


def test_prompt_logprobs_match_a_pass_and_reuse_the_cache(smol):
    s, _ = smol
    m = s.target_model
    story = " ".join(f"Item {i} is a {c} box." for i, c in enumerate(["red", "blue", "green"] * 4))
    context = m.tokenize(story + " The next item is a", add_special=True)
    assert len(context) > SCORE_CHUNK + 1  # a whole chunk of the context is reused below
    a = context + m.tokenize(" red box.", add_special=False)
    b = context + m.tokenize(" very small yellow box.", add_special=False)
    s.reset()
    got_a, evaluated = score(s, a)
    assert evaluated == len(a) - 1 and [e.token for e in got_a] == a and got_a[0].logprob is None
    rows = direct_rows(s, a[:-1])
    for i, e in enumerate(got_a[1:]):
        assert e.logprob == pytest.approx(rows[i][a[i + 1]], abs=TOL) and len(e.top) == 2
        assert [t for t, _, _ in e.top] == list(np.argsort(-rows[i], kind="stable")[:2])
    got_b, evaluated = score(s, b)  # the shared context: its whole chunks come from the cache
    reused = (len(context) - 1) // SCORE_CHUNK * SCORE_CHUNK
    assert evaluated == len(b) - 1 - reused
    s.reset()
    fresh_b, _ = score(s, b)
    assert [e.logprob for e in got_b] == [e.logprob for e in fresh_b]  # bit for bit: same shapes
    assert [e.top for e in got_b] == [e.top for e in fresh_b]
    again = list(s.generate(b, GenConfig(method="ar", n_predict=3, sampling=SamplingConfig(temp=0.0))))[-1]
    assert again.stats.prompt_evaluated == 0  # scoring left the cache as a plain sync does
    _, evaluated = score(s, b)  # the generation added tokens after the prompt, not in it
    assert evaluated == len(b) - 1 - (len(b) - 1) // SCORE_CHUNK * SCORE_CHUNK


def test_prompt_logprobs_before_a_generation(smol):
    s, _ = smol
    m = s.target_model
    toks = m.tokenize("One, two, three", add_special=True)
    plain = list(s.generate(toks, greedy("sd", L=4, n_predict=6, logprobs=None)))[-1].text
    list(s.generate(m.tokenize("Something else entirely", add_special=True), greedy("ar", n_predict=2)))
    score(s, m.tokenize("Another prompt", add_special=True))  # its own last token must be the pending one
    events = list(s.generate(toks, greedy("sd", L=4, n_predict=6, logprobs=0, prompt_logprobs=0)))
    assert isinstance(events[0], PromptLogprobs) and len(events[0].entries) == len(toks)
    assert events[-1].text == plain  # the answer continues THIS prompt (its last token pending)
    assert len(entries(events)) == len(s.last_tokens) > 0


def test_n_predict_zero_needs_prompt_logprobs():
    with pytest.raises(ConfigError, match="n-predict"):
        GenConfig(n_predict=0).validate()
    GenConfig(n_predict=0, prompt_logprobs=0).validate()
    with pytest.raises(ConfigError, match="logprobs must be in 0..20"):
        GenConfig(logprobs=21).validate()


def test_top_ids_is_a_sort_of_the_row():
    """The thresholded top-N (decode/logprobs.top_ids) against a full sort: random rows of
    every scale, ties at the boundary (lower id first) and -inf entries (a grammar's mask)."""
    from localspec.decode.logprobs import top_ids

    rng = np.random.default_rng(0)
    for _ in range(300):
        V = int(rng.integers(1, 3000))
        n = min(int(rng.integers(1, 25)), V)
        row = (rng.normal(size=V) * rng.choice([0.01, 1, 30, 1e5])).astype(np.float32)
        if rng.random() < 0.3:
            row = np.round(row)
        if rng.random() < 0.2:
            row[rng.random(V) < 0.5] = -np.inf
        want = np.lexsort((np.arange(V), -row.astype(np.float64)))[:n]
        assert list(top_ids(row, n, float(row.max()))) == list(want)


@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "gemma3"])
def test_every_memory_kind(tiny, arch):
    """A hybrid (state snapshots), a recurrent (branch copies) and a sliding-window memory:
    sd reports AR's log-probabilities, and prompt scoring leaves the state a generation
    continues from (a recurrent state cannot be cut back: scoring re-evaluates from 0).
    Tolerance: these random-weight models' verify batches move the numbers by up to 6e-4."""
    tol = 2e-3
    s = session(tiny[arch], tiny[arch + "-draft"])
    try:
        toks = s.tokenize("Write a story about a robot who learns to paint.")
        ref = list(s.generate(toks, greedy("ar", n_predict=24)))
        sd = list(s.generate(toks, greedy("sd", L=4, n_predict=24)))
        assert sd[-1].text == ref[-1].text
        got, want = entries(sd), entries(ref)
        assert [e.token for e in got] == [e.token for e in want] and got
        assert [e.logprob for e in got] == pytest.approx([e.logprob for e in want], abs=tol)
        for _ in range(2):  # the second time from the cache
            scored = list(s.generate(toks, greedy("ar", n_predict=24, prompt_logprobs=1)))
            assert len(scored[0].entries) == len(toks) and scored[-1].text == ref[-1].text
            assert [e.logprob for e in entries(scored)] == pytest.approx([e.logprob for e in want], abs=tol)
    finally:
        s.close()
