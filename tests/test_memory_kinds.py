"""Every method on every memory kind gives the target's text, or a one-line refusal.

localspec once assumed attention KV everywhere; on a hybrid model (Qwen3.5's gated delta net
+ attention) a partial acceptance left the main sequence's recurrent state at the branch's
last token, and the text departed from the target's. These tests run every offered method
on tiny random-weight models of each memory kind (tests/support/tiny_gguf) -- hybrid (`qwen35`,
which has llama.cpp's state snapshots), purely recurrent (`mamba2`, which has none: the
branch path), sliding window (`gemma3`, a window of 8 tokens that 60 tokens cross) and MoE
(`qwen3moe`) -- as target, as draft and as both, and require AR's greedy tokens, token for
token, with partial acceptances among the iterations. A near-copy draft (the target's
weights plus noise) is what makes partial acceptances happen.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from localspec.backend import Context
from localspec.backend.memory import Memory
from localspec.config import GenConfig, SamplingConfig
from localspec.decode.state import MAIN, KVState
from localspec.errors import ConfigError, SeqOpError
from tests.support.helpers import model, session

pytestmark = pytest.mark.model

KINDS = {"qwen35": Memory.HYBRID, "qwen35-mtp": Memory.HYBRID, "mamba2": Memory.RECURRENT, "gemma3": Memory.SLIDING_WINDOW,
         "qwen3moe": Memory.ATTENTION, "qwen3": Memory.ATTENTION}
PROMPT = "Write a story about a robot who learns to paint."
N = 60  # crosses gemma3's 8-token window many times; enough iterations for partial acceptances
ONE_DRAFT = [("sd", 1), ("gbv", 1), ("spectr", 1), ("mdbv", 1)]
MULTI_DRAFT = [("spectr", 2), ("mdbv", 3), ("spectr-gbv", 2)]


def greedy(method: str, K: int, n: int = N, **kw) -> GenConfig:
    return GenConfig(method=method, K=K, L=kw.pop("L", 5), n_predict=n, seed=1,
                     sampling=SamplingConfig(temp=0.0), dynamic_draft=False, **kw)


def run(sess, cfg: GenConfig, prompt: str = PROMPT):
    done = list(sess.complete(prompt, cfg))[-1]
    return list(sess.last_tokens), done.stats


def answer(sess, text: str, cfg: GenConfig) -> str:
    """One chat turn's answer (the Done event's text)."""
    return [e for e in sess.chat(text, cfg)][-1].text


def pairings(tiny: dict[str, Path], arch: str) -> dict[str, tuple[Path, Path]]:
    return {"both": (tiny[arch], tiny[arch + "-draft"]), "as-target": (tiny[arch], tiny["other"]),
            "as-draft": (tiny["other"], tiny[arch + "-draft"])}


@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "gemma3", "qwen3moe"])
def test_memory_kind_is_read_at_load(tiny, arch):
    sess = session(tiny[arch], tiny[arch + "-draft"])
    assert sess.target.memory is KINDS[arch] and sess.draft.memory is KINDS[arch]
    ctx = sess.target.ctx
    if KINDS[arch].has_state:
        assert ctx.n_seq_max == 2  # one state per sequence: main + one branch
        assert ctx.n_rs_seq == (16 if arch == "qwen35" else 0)  # llama.cpp: no mamba2 snapshots
        assert sess.target.lane(1, 5) == (MAIN if arch == "qwen35" else 1)
        assert sess.target.lane(1, 17) == 1  # past the snapshots: the branch path
        assert sess.draft.lane(1, 5, one_decode=False) == 1  # a draft model drafts over several decodes
    else:
        assert ctx.n_rs_seq == 0 and sess.target.lane(3, 5) is None


@pytest.mark.parametrize("arch,pairing", [
    *[(a, p) for a in ("qwen35", "mamba2", "gemma3", "qwen3moe") for p in ("both", "as-target", "as-draft")],
    ("qwen35-mtp", "both"),  # a target with a nextn layer: its trunk runs as before
])
@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_every_offered_method_gives_ar_greedy_text(tiny, arch, pairing):
    target, draft = pairings(tiny, arch)[pairing]
    sess = session(target, draft)
    ref, _ = run(sess, greedy("ar", 1))
    assert len(ref) == N
    stateful = KINDS[arch].has_state
    methods = ONE_DRAFT + ([] if stateful else MULTI_DRAFT)
    partial = 0
    for method, K in methods:
        toks, st = run(sess, greedy(method, K))
        assert toks == ref, f"{method} K={K} departs from AR"
        partial += sum(0 < t < 5 for t in st.accepted_lengths)
        if pairing == "both":
            assert st.iterations < N  # it speculated
        else:
            assert any(t < 5 for t in st.accepted_lengths)  # rejections: rollbacks happened
    if pairing == "both":
        assert partial >= len(methods)  # partial acceptances on average once per method at least
    if not stateful:  # PARSE is offered here too (a judge, not lossless: it only has to run)
        toks, st = run(sess, GenConfig(method="parse", n_predict=N, seed=1, sampling=SamplingConfig(temp=0.0)))
        assert len(toks) == N and st.method == "parse"


@pytest.mark.parametrize("arch", ["qwen35", "mamba2"])
def test_refused_methods_name_what_works(tiny, arch):
    sess = session(tiny[arch], tiny[arch + "-draft"])
    for cfg in (greedy("mdbv", 2), greedy("spectr", 3), greedy("spectr-gbv", 2),
                GenConfig(method="parse"), greedy("auto", 2),
                greedy("sd", 1, spec_type=("ngram+draft",))):  # a stack is two drafts
        with pytest.raises(ConfigError, match="recurrent state.*-K 1.*--method ar") as e:
            list(sess.complete(PROMPT, cfg))
        assert "\n" not in str(e.value)


def test_auto_times_and_runs_on_a_hybrid_pair(tiny, tmp_path, monkeypatch):
    """The cost model's timing on recurrent memories (once exit 2: a partial seq_rm) runs,
    auto only ever chooses one draft, and the text is AR's."""
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    sess = session(tiny["qwen35"], tiny["qwen35-draft"])
    ref, _ = run(sess, greedy("ar", 1))
    cfg = GenConfig(method="auto", n_predict=N, seed=1, sampling=SamplingConfig(temp=0.0),
                    auto_K=True, auto_L=True)
    toks, st = run(sess, cfg)
    assert toks == ref
    assert sess.costs is not None and sess.costs.target.sizes[0] == 1  # timed for real
    assert "K=2" not in st.ran and "K=3" not in st.ran
    assert "memory: target hybrid, 16 state snapshots" in sess.explain(cfg)


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_auto_speculating_on_recurrent_memories_keeps_ar_text(tiny, monkeypatch):
    """Under a cost model where speculation always pays, auto speculates with K = 1 on a
    recurrent target (branch path) and a hybrid draft, with dynamic draft lengths."""
    from tests.support.helpers import paying_cost_model_with_cutoff

    for t, d in ((tiny["mamba2"], tiny["mamba2-draft"]), (tiny["qwen35"], tiny["qwen35-draft"])):
        sess = session(t, d)
        ref, _ = run(sess, greedy("ar", 1))
        shapes = paying_cost_model_with_cutoff(sess, monkeypatch, 0.0)
        toks, st = run(sess, GenConfig(method="auto", n_predict=N, seed=1, sampling=SamplingConfig(temp=0.0),
                                       auto_K=True, auto_L=True))
        assert toks == ref
        assert st.ran.startswith("sd K=1") and shapes and all(len(s) == 1 for s in shapes)
        sess.costs = None


@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "gemma3", "qwen3moe"])
def test_multi_turn_chat_and_a_diverged_history(tiny, arch):
    """Two chat turns (the second re-evaluates the first's answer, reasoning-free history)
    and then a prompt that departs inside the cached history: sd equals a fresh AR session."""
    cfg_sd, cfg_ar = greedy("sd", 1, n=24), greedy("ar", 1, n=24)
    spec = session(tiny[arch], tiny[arch + "-draft"])
    a1, a2 = answer(spec, "Name a color.", cfg_sd), answer(spec, "And another one?", cfg_sd)
    ref = session(tiny[arch])
    r1, r2 = answer(ref, "Name a color.", cfg_ar), answer(ref, "And another one?", cfg_ar)
    assert (a1, a2) == (r1, r2)
    # a prompt sharing only a few tokens with what is cached: the cut of a recurrent state
    # restarts it, an attention cache keeps the common prefix
    toks = spec.last_prompt_tokens[:6] + spec.tokenize(" something else entirely")
    got = [e for e in spec.generate(toks, cfg_sd)][-1]
    fresh = session(tiny[arch])
    want = [e for e in fresh.generate(toks, cfg_ar)][-1]
    assert spec.last_tokens == fresh.last_tokens and got.text == want.text
    kept = got.stats.prompt_tokens - 1 - got.stats.prompt_evaluated  # the last one is pending
    assert kept == 0 if KINDS[arch].has_state else kept >= 6


@pytest.mark.parametrize("arch", ["qwen35", "mamba2"])
def test_recurrent_draft_state_is_right_not_only_the_text(tiny, arch, monkeypatch):
    """A draft whose state is left wrong after a rollback still gives the target's text (the
    target decides) but drafts worse. Its acceptance per iteration must equal that of a draft
    re-evaluated from scratch before every proposal."""
    from localspec.decode.drafters.model import ModelDrafter

    sess = session(tiny[arch], tiny[arch + "-draft"])
    _, kept = run(sess, greedy("sd", 1))
    real = ModelDrafter.propose

    def from_scratch(self, req):
        self.draft.reset()  # forget the draft's state: everything is evaluated again
        return real(self, req)

    monkeypatch.setattr(ModelDrafter, "propose", from_scratch)
    _, fresh = run(sess, greedy("sd", 1))
    assert kept.accepted_lengths == fresh.accepted_lengths
    assert any(0 < t < 5 for t in kept.accepted_lengths)


def test_a_state_left_behind_is_detected(tiny, monkeypatch):
    """The equality test has power: a commit that forgets to roll the hybrid target's state
    back (llama.cpp's refusal ignored, as before) departs from AR."""
    sess = session(tiny["qwen35"], tiny["qwen35-draft"])
    ref, _ = run(sess, greedy("ar", 1))
    monkeypatch.setattr(Context, "seq_rm", lambda self, seq, p0=0, p1=-1: None)  # ignores every removal
    monkeypatch.setattr(KVState, "lane", lambda self, K, L, one_decode=True: None)  # the attention path
    sess.reset()
    toks, _ = run(sess, greedy("sd", 1))
    assert toks != ref


# ---------------------------------------------------------------- refusals are never ignored
class Refusing:
    """llama_memory_seq_rm that refuses (as a recurrent memory does for a span)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, mem, seq, p0, p1) -> bool:
        self.calls += 1
        return False


def test_every_refused_seq_rm_raises(tiny, monkeypatch):
    from localspec import costmodel

    m = model(tiny["qwen3moe"])
    st = KVState(Context(m, n_ctx=256, n_batch=64, n_seq_max=4, threads=1))
    st.sync(m.tokenize("one two three four five"))
    refuse = Refusing()
    monkeypatch.setattr(llama_cpp, "llama_memory_seq_rm", refuse)
    with pytest.raises(SeqOpError, match="refused to remove positions 2..the end of sequence 0"):
        st.ctx.seq_rm(MAIN, 2, -1)
    with pytest.raises(SeqOpError):
        st.commit([], 5, seq=MAIN)  # a rollback on the main sequence
    with pytest.raises(SeqOpError):
        st.sync(m.tokenize("one two six"))  # a cut of the cached prefix
    with pytest.raises(SeqOpError):
        st.repair()  # dropping drafts
    with pytest.raises(SeqOpError):
        costmodel.measure(st.ctx, sizes=(1,), reps=1, depth=4)  # the cost model's rollback
    assert not st.ctx.try_seq_rm(MAIN, 2, -1)  # the one caller-handled form says False
    assert refuse.calls >= 6


def test_a_branch_commit_checks_the_main_state(tiny):
    """A recurrent branch that cannot be adopted leaves the main state where it was; a main
    state that is not where the bookkeeping says raises instead of emitting wrong text."""
    m = model(tiny["mamba2"])
    st = KVState(Context(m, n_ctx=256, n_batch=64, n_seq_max=4, threads=1))
    st.sync(m.tokenize("one two three four five"))
    n_past, pending = st.n_past, list(st.pending)
    ctx = st.ctx
    st.share_main([1])
    ctx.batch.clear().add_sequence([*pending, 11, 12], n_past, 1, True)
    ctx.decode()
    st.commit([11], 13, seq=1)  # one of two drafted tokens kept: the branch is dropped
    assert st.n_past == n_past and st.pending == [*pending, 11, 13] and st.reevaluated == 2
    assert ctx.pos_max(1) == -1 and ctx.pos_max(MAIN) == n_past - 1
    assert st.catch_up() == 2 and st.pending == [13] and ctx.pos_max(MAIN) == n_past + 1
    st.share_main([1])
    ctx.batch.clear().add_sequence([13, 14], st.n_past, 1, True)
    ctx.decode()
    st.tokens.append(99)  # bookkeeping that no longer matches the state
    with pytest.raises(SeqOpError, match="main state holds"):
        st.commit([14], 15, seq=1)


# ---------------------------------------------------------------- the CLI
def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localspec.cli", *args], capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)


def test_cli_refuses_a_draft_tree_on_a_hybrid_model_in_one_line(tiny):
    t, d = str(tiny["qwen35"]), str(tiny["qwen35-draft"])
    r = cli("run", "-m", t, "-md", d, "-p", "hi", "-n", "4", "--method", "mdbv", "-K", "2", "--temp", "0")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "recurrent state" in lines[0] and "-K 1" in lines[0]
    r = cli("run", "-m", t, "-md", d, "-p", "hi", "-n", "8", "--method", "sd", "--temp", "0")
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
@pytest.mark.law
def test_hybrid_target_keeps_the_target_law_at_t_above_0(tiny):
    """chi-square on the first two tokens (tests/test_lossless_real.py's approach) for sd and
    gbv on the hybrid pair at T = 1: the rollback path is lossless in law, not only greedy."""
    from tests.test_lossless_real import chi2_pvalue

    sampling = SamplingConfig(temp=1.0, top_k=6, top_p=1.0, min_p=0.0)
    sess = session(tiny["qwen35"], tiny["qwen35-draft"])
    law = _two_token_law(sess, sampling)
    for method in ("sd", "gbv"):
        pairs = []
        for seed in range(2000):
            cfg = GenConfig(method=method, K=1, L=2, n_predict=2, seed=seed, sampling=sampling, dynamic_draft=False)
            list(sess.complete(PROMPT, cfg))
            pairs.append(tuple(sess.last_tokens[:2]))
        assert chi2_pvalue(pairs, law) > 1e-3, method


def _two_token_law(sess, sampling: SamplingConfig) -> dict[tuple[int, int], float]:
    """P(t1, t2) from the target alone: each first token on a fresh state (no rollback)."""
    from localspec.sampling import transform_row

    toks = sess._prompt_tokens(sess.template.render([{"role": "user", "content": PROMPT}]))
    ctx = Context(sess.target_model, n_ctx=256, n_batch=256, n_seq_max=1, threads=1)
    row = ctx.batch.clear().add_sequence(toks, 0, 0, True)
    ctx.decode()
    first = transform_row(np.array(ctx.logits(row)), sampling)
    law = {}
    for t1, p1 in zip(first.ids.tolist(), first.probs.tolist(), strict=True):
        ctx.seq_rm(0, 0, -1)
        r = ctx.batch.clear().add_sequence([*toks, t1], 0, 0, True)
        ctx.decode()
        second = transform_row(ctx.logits(r), sampling)
        for t2, p2 in zip(second.ids.tolist(), second.probs.tolist(), strict=True):
            law[(t1, t2)] = p1 * p2
    return law


def test_the_cost_model_prices_what_a_recurrent_memory_makes_a_rejection_cost():
    """A target that cannot roll back pays a catch-up decode for a partly accepted draft, a
    recurrent draft re-evaluates what it kept: both make speculation predict slower, never
    faster, and attention memories are priced as before."""
    from localspec.costmodel import Acceptance, CostCurve, CostModel

    def cm(**kw) -> CostModel:
        return CostModel(CostCurve([1, 64], [0.010, 0.030]), CostCurve([1, 64], [0.002, 0.004]),
                         acceptance=Acceptance(prior=0.7), **kw)

    plain, snap, none, redraft = cm(), cm(target_rollback=16), cm(target_rollback=0), cm(draft_reevaluates=True)
    for L in (2, 8):
        assert snap.iteration_seconds(1, L) == plain.iteration_seconds(1, L)  # snapshots: free
        assert none.iteration_seconds(1, L) > plain.iteration_seconds(1, L) + 0.5 * plain.target(1)
        assert redraft.iteration_seconds(1, L) > plain.iteration_seconds(1, L)
    assert snap.iteration_seconds(1, 17) > plain.iteration_seconds(1, 17)  # past the snapshots


def test_a_hybrid_target_without_snapshots_takes_the_branch_path(tiny):
    """--rs-snapshots 0 on qwen35: every draft is scored on a branch copy; a partly accepted
    one costs a catch-up decode; the text is still AR's."""
    sess = session(tiny["qwen35"], tiny["qwen35-draft"], rs_snapshots=0)
    assert sess.target.ctx.n_rs_seq == 0 and sess.target.lane(1, 5) == 1
    ref, _ = run(sess, greedy("ar", 1))
    toks, st = run(sess, greedy("sd", 1))
    assert toks == ref and any(0 < t < 5 for t in st.accepted_lengths)
    assert sess.target.reevaluated > 0


def test_a_placement_that_cannot_be_timed_falls_back_to_ar_in_one_line(tiny, tmp_path, monkeypatch):
    """Timing that fails (a backend refusing the scratch decodes) never ends the run: auto
    decodes plainly and says why in its stats note."""
    from localspec import costmodel
    from localspec.errors import LocalspecError

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))

    def failing(ctx, full=False):
        raise LocalspecError("llama_decode failed with code -1 (the backend)")
        yield  # a generator, as timing_steps is

    from localspec.costmodel import curves

    monkeypatch.setattr(costmodel, "timing_steps", failing)
    monkeypatch.setattr(curves, "timing_steps", failing)  # what the session's timer calls
    sess = session(tiny["qwen35"], tiny["qwen35-draft"])
    ref, _ = run(sess, greedy("ar", 1))
    toks, st = run(sess, GenConfig(method="auto", n_predict=N, seed=1, sampling=SamplingConfig(temp=0.0)))
    assert toks == ref and st.ran == "ar" and st.method == "auto"
    assert st.choice_note.startswith("the cost model could not time this placement (llama_decode failed")


def test_a_sliding_window_prefix_whose_cells_were_reused_is_evaluated_again(tiny, monkeypatch):
    """A reused prefix needs the window before the cut: when llama.cpp reports the sequence's
    oldest cell past it (its cells were reused), the prefix is evaluated from the start."""
    m = model(tiny["gemma3"])
    st = KVState(Context(m, n_ctx=256, n_batch=64, n_seq_max=4, threads=1))
    first = m.tokenize(" ".join(f"w{i}" for i in range(30)))
    st.sync(first)
    assert st.sync(first[:20] + [5, 6, 7]) == 2  # the window is there: only 5, 6 are evaluated
    monkeypatch.setattr(Context, "pos_min", lambda self, seq=0: 15)  # cells before 15 reused
    assert st.sync(first[:20] + [8, 9]) == 21  # 20 - 15 < the 8-token window: all again
    assert st.ctx.n_rs_seq == 0 and st.memory is Memory.SLIDING_WINDOW


def test_a_batch_that_cannot_hold_the_snapshots_is_refused_not_aborted(tiny):
    """llama.cpp aborts the process when a ubatch cannot keep 1 + n_rs_seq trailing tokens;
    localspec says which flag to change instead (and the smallest batch that works runs)."""
    m = model(tiny["qwen35"])
    with pytest.raises(ConfigError, match=r"--batch 16 is too small.*--rs-snapshots 16.*--batch 18"):
        Context(m, n_ctx=256, n_batch=16, n_seq_max=2, threads=1, rs_snapshots=16)
    words = ("one two three four five six seven eight nine ten eleven twelve thirteen "
             "fourteen fifteen sixteen seventeen eighteen nineteen twenty")
    st = KVState(Context(m, n_ctx=256, n_batch=18, n_seq_max=2, threads=1, rs_snapshots=16))
    st.sync(m.tokenize(words))
    assert st.n_past > 18
    # mamba2 has no snapshot rollback: llama.cpp clamps n_rs_seq to 0, so a small batch is
    # no danger there and must not be refused (it rolls back by branch copies)
    r = model(tiny["mamba2"])
    ctx = Context(r, n_ctx=256, n_batch=16, n_seq_max=2, threads=1, rs_snapshots=16)
    assert ctx.n_rs_seq == 0
    st = KVState(ctx)
    st.sync(r.tokenize(words))
    assert st.n_past > 16


@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "gemma3"])
def test_a_prediction_with_an_edit_keeps_ar_text_on_every_memory_kind(tiny, arch):
    """A client's prediction (decode/drafters/prediction.py) drafts point masses like a lookup:
    on a hybrid, recurrent and sliding-window target, a prediction that is AR's answer with an
    edit in the middle is partly accepted, partly rejected, and the tokens stay AR's."""
    sess = session(tiny[arch])
    ref, _ = run(sess, greedy("ar", 1))
    text = sess.target_model.detokenize(ref)
    edited = text[: len(text) // 2] + " an edit " + text[len(text) // 2:]
    toks, st = run(sess, greedy("sd", 1, spec_type=("ngram",), prediction=edited))
    assert toks == ref
    drafted, accepted = st.proposed.get("prediction", (0, 0))
    assert 0 < accepted < drafted, st.proposed  # partly right: the edit was rejected, the rest kept
