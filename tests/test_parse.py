"""PARSE on real models: one-pass scores equal per-prefix scores, one decode per round,
end-to-end text bookkeeping. Fast on SmolLM2; the same equivalence on the Qwen pair is slow."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from localspec.backend import Context
from localspec.backend.chat import ChatTemplate
from localspec.config import GenConfig, ParseConfig
from localspec.decode.parse.judges import make_judge
from localspec.decode.parse.loop import ParseStats, judge_round
from localspec.decode.parse.one_pass import answer_features, judge_pass
from localspec.decode.state import MAIN, KVState
from localspec.events import Accepted, Cut, Done, Drafted, Judged, Rejected, Written
from tests.support.helpers import model, session

QUESTION = "Write a Python function that checks if a number is prime."
ANSWER = (
    "def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, n):\n"
    "        if n % i == 0:\n            return True\n    return False\n"
)


def _setup(path: Path, n_seq_max: int = 16):
    m = model(path)
    ctx = Context(m, n_ctx=1024, n_batch=512, n_seq_max=n_seq_max, threads=1)
    tpl = ChatTemplate(m)
    prompt = m.tokenize(tpl.render([{"role": "user", "content": QUESTION}]), parse_special=True)
    answer = m.tokenize(ANSWER, parse_special=True)
    return m, ctx, KVState(ctx), prompt, answer


def _separate_scores(m, st: KVState, prompt, answer, cuts, judge) -> tuple[list[float], np.ndarray]:
    """Each prefix judged alone (fresh KV, plain sequence) + gaps from a plain pass."""
    out = []
    for c in cuts:
        suffix = judge.suffix[1:] if answer[c - 1] == judge.suffix[0] else judge.suffix
        st.reset()
        st.sync(prompt + answer[:c] + suffix)
        row = st.ctx.batch.clear().add_sequence(st.pending, st.n_past, MAIN, True)
        st.ctx.decode()
        out.append(judge.verdict.score(st.ctx.logits(row)[judge.reduce_ids].astype(np.float64)))
    st.reset()
    st.sync(prompt)
    b = st.ctx.batch.clear()
    for j, t in enumerate(st.pending + answer):
        b.add(t, st.n_past + j, MAIN, True)
    st.ctx.decode()
    f = answer_features(st.ctx.logits_all(), answer, want_nll=False, sampling=None)
    return out, f.gaps


def _check_equivalence(path: Path) -> None:
    m, ctx, st, prompt, answer = _setup(path)
    T = len(answer)
    cuts = [T // 5, 2 * T // 5, 3 * T // 5, 4 * T // 5, T]
    judge = make_judge(m, ParseConfig(judge="hybrid"))
    st.sync(prompt)
    n0 = ctx.n_decodes
    res = judge_pass(st, answer, judge.copies(cuts), judge.reduce_ids)
    assert ctx.n_decodes == n0 + 1  # every copy and the answer in ONE llama_decode
    one = [judge.verdict.score(res.copy_logits[i]) for i in range(len(cuts))]
    gaps = res.answer.gaps.copy()
    sep, sep_gaps = _separate_scores(m, st, prompt, answer, cuts, judge)
    assert np.max(np.abs(np.array(one) - np.array(sep))) < 0.05, (one, sep)
    assert np.max(np.abs(gaps - sep_gaps)) < 0.5
    ctx.close()


def test_one_pass_equals_separate_prefixes_smollm2(smollm2_path: Path) -> None:
    _check_equivalence(smollm2_path)


@pytest.mark.slow
def test_one_pass_equals_separate_prefixes_qwen(qwen_target_path: Path) -> None:
    _check_equivalence(qwen_target_path)


def _turn(sess, cfg: GenConfig, prompt_text: str = QUESTION):
    """A Turn over a session's contexts, as RuntimeSession._generate builds it."""
    from localspec.decode.emitter import Emitter
    from localspec.decode.turn import Turn
    from localspec.events import Stats
    from localspec.stopflag import StopFlag

    toks = sess._prompt_tokens(sess.template.render([{"role": "user", "content": prompt_text}]))
    sess.target.sync(toks)
    em = Emitter(sess.target_model, cfg.n_predict, cfg.stop)
    return Turn(sess.target_model, sess.target, cfg, em, Stats(method="parse"), np.random.default_rng(0),
                StopFlag(), sess.draft_model, sess.draft)


@pytest.mark.parametrize("two_stage,threshold,expected", [(False, 0.5, 1), (True, 1.01, 2), (True, 0.0, 1)])
def test_decodes_per_round(smollm2_path: Path, two_stage: bool, threshold: float, expected: int) -> None:
    """One decode per round; two-stage adds one only when the whole answer is rejected."""
    sess = session(smollm2_path, smollm2_path, threads=1)
    m = sess.target_model
    cfg = GenConfig(method="parse", parse=ParseConfig(judge="prompt", threshold=threshold, two_stage=two_stage))
    turn = _turn(sess, cfg)
    judge = make_judge(m, cfg.parse)
    answer = m.tokenize(ANSWER, parse_special=True)
    T = len(answer)
    n0 = sess.target.ctx.n_decodes
    res, scores = judge_round(turn, judge, answer, [T // 3, 2 * T // 3, T])
    assert sess.target.ctx.n_decodes - n0 == expected == res.n_decodes
    assert len(scores) == 3
    sess.close()


def _run(sess, cfg: GenConfig, prompt: str = QUESTION) -> list:
    return list(sess.complete(prompt, cfg))


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_end_to_end_text_is_accepted_prefix_plus_target(smollm2_path: Path, smollm2_q4_0_path: Path) -> None:
    sess = session(smollm2_path, smollm2_q4_0_path, threads=1)
    pc = ParseConfig(judge="likelihood", gamma=0.5, cuts=6, min_seg=4, resume="target")
    cfg = GenConfig(method="parse", n_predict=120, seed=0, parse=pc)
    events = _run(sess, cfg, QUESTION + " Explain it line by line.")
    done = events[-1]
    assert isinstance(done, Done)
    st = done.stats
    assert isinstance(st, ParseStats) and st.parse is not None
    rounds = st.parse["rounds"]
    assert rounds and set(rounds[0]) >= {"cuts", "scores", "t_star", "judge_decodes", "draft_tokens", "accepted_tokens"}
    judged = [e for e in events if isinstance(e, Judged)]
    assert len(judged[0].cuts) >= 2  # a multi-line answer gets several cut points
    # the visible text is exactly the accepted + written pieces, in order
    visible = "".join(e.text for e in events if isinstance(e, Accepted | Written))
    assert visible == done.text
    # round 1: accepted tokens are the drafted prefix [:t*]; the rest is the target's
    cut = next(e for e in events if isinstance(e, Cut))
    acc = next(e for e in events if isinstance(e, Accepted))
    first_draft = [e for e in events[: events.index(judged[0])] if isinstance(e, Drafted)][-1]
    assert acc.tokens == first_draft.drafts[0][: cut.t_star]
    assert cut.t_star == rounds[0]["accepted_tokens"] >= rounds[0]["t_star"]
    if cut.t_star < cut.n_draft:
        assert any(isinstance(e, Rejected) for e in events)
        written = [t for e in events if isinstance(e, Written) for t in e.tokens]
        # resume=target: what follows the kept prefix is the target's own greedy continuation
        ref = session(smollm2_path, threads=1)
        prompt = ref._prompt_tokens(ref.template.render([{"role": "user", "content": QUESTION + " Explain it line by line."}]))
        ar = list(ref._generate(prompt + list(acc.tokens), replace(cfg, method="ar", n_predict=8), None))
        ar_tokens = [t for e in ar if isinstance(e, Written) for t in e.tokens]
        assert written[:5] == ar_tokens[:5]
        ref.close()
    sess.close()


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_iterative_rounds_and_json_record(smollm2_path: Path, smollm2_q4_0_path: Path) -> None:
    sess = session(smollm2_path, smollm2_q4_0_path, threads=1)
    for judge in ("likelihood", "prompt", "hybrid"):
        pc = ParseConfig(judge=judge, gamma=0.3, threshold=0.6, cuts=4, min_seg=4)
        cfg = GenConfig(method="parse", n_predict=60, seed=0, parse=pc)
        events = _run(sess, cfg)
        done = events[-1]
        assert "".join(e.text for e in events if isinstance(e, Accepted | Written)) == done.text
        rec = done.stats.parse
        assert rec["judge"] == judge and len(rec["rounds"]) >= 1
        for r in rec["rounds"]:
            assert r["judge_decodes"] == 1
            assert len(r["scores"]) == len(r["cuts"]) and r["cuts"][-1] == r["draft_tokens"]
            assert 0 <= r["t_star"] <= r["accepted_tokens"] <= r["draft_tokens"]
        # target KV holds exactly the committed tokens after the turn (nothing stale)
        assert sess.target.ctx.pos_max(MAIN) == len(sess.target.tokens) - 1
    sess.close()


def test_cuts_clamped_to_sequences(smollm2_path: Path) -> None:
    sess = session(smollm2_path, smollm2_path, n_seq_max=4, threads=1)
    cfg = GenConfig(method="parse", n_predict=40, seed=0, parse=ParseConfig(judge="prompt", cuts=12, min_seg=2))
    events = _run(sess, cfg)
    done = events[-1]
    assert "clamped to 3" in done.stats.parse["notes"][0]
    assert all(len(e.cuts) <= 3 for e in events if isinstance(e, Judged))
    sess.close()


def test_resume_spec_is_parse_composed_with_lossless_decoding(smollm2_path: Path, smollm2_q4_0_path: Path) -> None:
    """A judge that trusts nothing + resume=spec: every token is verified by the target, so
    the greedy answer is the target's own, written in speculative blocks (fewer target
    calls than tokens)."""
    sess = session(smollm2_path, smollm2_q4_0_path, threads=1)
    pc = ParseConfig(judge="prompt", threshold=1.01, cuts=4, min_seg=4, resume="spec")
    events = _run(sess, GenConfig(method="parse", n_predict=60, seed=0, L=4, parse=pc))
    done = events[-1]
    assert isinstance(done, Done)
    rounds = done.stats.parse["rounds"]
    assert len(rounds) == 1 and rounds[0]["t_star"] == 0 and rounds[0]["target_tokens"] > 1
    assert done.stats.target_calls < done.stats.n_tokens  # blocks, not one decode per token
    assert "".join(e.text for e in events if isinstance(e, Accepted | Written)) == done.text
    sess.close()
    # the target's own greedy answer -- up to llama.cpp's batch-size numerics: the judge pass
    # scores the answer in one big batch, AR one token at a time, so an argmax may flip where
    # two logits nearly tie (docs/design.md#numerics); any divergence must be such a near-tie
    from tests.test_speculative import first_divergence_gap

    ref = session(smollm2_path, threads=1)
    prompt = ref._prompt_tokens(ref.template.render([{"role": "user", "content": QUESTION}]))
    ar_events = list(ref.complete(QUESTION, GenConfig(method="ar", n_predict=60, seed=0)))
    ar = [t for e in ar_events if isinstance(e, Written) for t in e.tokens]
    got = [t for e in events if isinstance(e, Accepted | Written) for t in e.tokens]
    ref.close()
    gap = first_divergence_gap(None, smollm2_path, ar, got, prompt)
    assert gap is None or gap < 1.0, f"diverged from the target's greedy answer with a logit gap of {gap}"


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_resume_spec_without_L_finishes_as_auto(smollm2_path: Path, smollm2_q4_0_path: Path, monkeypatch) -> None:
    """No -L given: PARSE's finish runs what `--method auto` would, with the session's cost
    model. On this pair the draft costs as much as the target, so auto writes the rest with
    plain decoding (the Q4_0 copy of a 135M model cannot pay) -- one target call per token
    after the judge pass -- and its acceptance evidence is saved like auto's."""
    sess = session(smollm2_path, smollm2_q4_0_path, threads=1)
    pc = ParseConfig(judge="prompt", threshold=1.01, cuts=4, min_seg=4, resume="spec")
    cfg = GenConfig(method="parse", n_predict=40, seed=0, auto_K=True, auto_L=True, parse=pc)
    done = _run(sess, cfg)[-1]
    assert isinstance(done, Done)
    assert sess.costs is not None and sess.costs.acceptance_path is not None
    rounds = done.stats.parse["rounds"]
    assert len(rounds) == 1 and rounds[0]["t_star"] == 0
    assert done.stats.target_calls >= rounds[0]["target_tokens"]  # AR: a call per token
    # the session keeps its cost model; a later turn WITH -L must still run fixed blocks
    # (the finish follows the config, not whatever an earlier turn left on the session)
    from localspec.decode.policy import auto

    def no_auto(turn):
        raise AssertionError("-L was given: the finish must not run auto")

    monkeypatch.setattr(auto, "auto_loop", no_auto)
    again = _run(sess, GenConfig(method="parse", n_predict=40, seed=0, L=4, parse=pc))[-1]
    assert again.stats.parse["rounds"][0]["t_star"] == 0
    assert again.stats.target_calls < again.stats.n_tokens  # speculative blocks, not AR
    sess.close()
