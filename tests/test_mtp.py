"""The target's MTP head as a proposer (`--spec-type mtp`): backend/mtp.py, decode/drafters/mtp.py.

Two tiny random qwen35 targets with one nextn layer (tests/support/tiny_gguf, the
259-token byte vocabulary: the files take a second to write and the 151,936-token Qwen
head would make every decode ~100x dearer):
`qwen35-mtp`, a random head whose guesses the target almost never takes (every draft is
rejected: the head is fed a history of corrections), and `qwen35-mtp-echo`, a head the
target agrees with part of the time (partial acceptances: the head is fed accepted drafts).
The drafted tokens are compared with llama.cpp's own `llama-speculative-simple --spec-type
draft-mtp` on the same file and prompt (the peer built from the same sources), so the
hidden-state hand-off is proven against llama.cpp's, not assumed.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from localspec.backend import Model
from localspec.bench import peer
from localspec.config import GenConfig, SamplingConfig
from localspec.errors import ConfigError, LocalspecError
from localspec.events import Drafted, Stats
from localspec.pool import open_pool
from localspec.runtime import RuntimeSession
from localspec.session import SessionOptions

pytestmark = pytest.mark.model

PROMPT = "Write a story about a robot who learns to paint."
LONG = PROMPT + " " + " ".join(f"Step {i}: mix the colours again, then paint the robot's hands." for i in range(14))
N = 40
_models: dict[str, Model] = {}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """qwen35-mtp (a random head), qwen35-mtp-echo (a head the target partly agrees with),
    qwen35 (no head)."""
    from tests.support.tiny_gguf import byte_tokenizer, write_tiny

    d, tok = tmp_path_factory.mktemp("tiny_mtp"), byte_tokenizer()
    return {"qwen35-mtp": write_tiny(d / "qwen35-mtp.gguf", "qwen35", tok, seed=0, nextn=1),
            "qwen35-mtp-echo": write_tiny(d / "qwen35-mtp-echo.gguf", "qwen35", tok, seed=0, nextn=1, echo=0.1),
            "qwen35": write_tiny(d / "qwen35.gguf", "qwen35", tok, seed=0)}


def head_session(path: Path, **kw) -> RuntimeSession:
    """A session whose target is loaded with its MTP layers and has its head."""
    key = str(path)
    if key not in _models:
        _models[key] = Model(path, load_mtp=True)
    opts = SessionOptions(n_ctx=kw.pop("n_ctx", 2048), n_batch=kw.pop("n_batch", 256), threads=1, mtp=True, **kw)
    return RuntimeSession(_models[key], None, opts)


def greedy(method: str = "sd", n: int = N, **kw) -> GenConfig:
    return GenConfig(method=method, K=1, L=kw.pop("L", 3), n_predict=n, sampling=SamplingConfig(temp=0.0),
                     dynamic_draft=False, spec_type=kw.pop("spec_type", ("mtp",)), **kw)


def run(sess: RuntimeSession, cfg: GenConfig, prompt: str | list[int] = PROMPT) -> tuple[list[int], list[list[int]], Stats]:
    """(tokens, the drafts in order, stats) of one generation."""
    drafts, done = [], None
    for ev in sess.generate(prompt, cfg):
        if isinstance(ev, Drafted):
            drafts.append(list(ev.drafts[0]))
        done = ev
    return list(sess.last_tokens), drafts, done.stats


def ar_tokens(sess: RuntimeSession, prompt: str = PROMPT, n: int = N) -> list[int]:
    list(sess.generate(prompt, GenConfig(method="ar", n_predict=n, sampling=SamplingConfig(temp=0.0))))
    return list(sess.last_tokens)


@pytest.mark.parametrize("arch", ["qwen35-mtp", "qwen35-mtp-echo"])
def test_greedy_text_equals_ar_with_every_one_draft_verifier(tiny, arch):
    sess = head_session(tiny[arch])
    ref = ar_tokens(sess)
    assert len(ref) == N
    accepted = 0
    for method in ("sd", "gbv", "spectr", "mdbv"):
        toks, drafts, st = run(sess, greedy(method))
        assert toks == ref, f"{method} with the MTP head departs from AR"
        assert st.iterations < N + 1 and drafts and all(len(d) <= 3 for d in drafts)
        drafted, acc = st.proposed["mtp"]
        assert drafted == sum(len(d) for d in drafts) and st.draft_calls > 0
        j = st.to_json()["proposers"]["mtp"]
        assert (j["drafted"], j["accepted"]) == (drafted, acc) and j["acceptance"] == (acc / drafted if drafted else None)
        accepted += acc
        if arch == "qwen35-mtp-echo":
            assert 0 < acc < drafted and any(0 < t < 3 for t in st.accepted_lengths)  # partial acceptances
    if arch == "qwen35-mtp":
        assert accepted <= 2  # a random head: the path where every draft is corrected
    sess.close()


def peer_drafts(path: Path, prompt: str, n: int, L: int) -> list[list[int]]:
    """The tokens llama.cpp's draft-mtp drafted, in order: its debug log prints the top
    candidates of each draft step (`draft candidate 0, pos i: id`), pos 0 opening a draft."""
    cmd = peer.build_speculative_cmd(peer.require_peer_binaries()[peer.SPEC_BIN], path, path, prompt,
                                     n_predict=n, threads=2, draft_max=L, draft_min=0, p_min=0.0, temp=0.0,
                                     ctx_size=2048, spec_type="draft-mtp",
                                     extra_args=["--no-spec-draft-backend-sampling", "-v"])
    assert "-md" not in cmd  # the head is the target's own
    out = peer.run_tool(cmd, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    drafts: list[list[int]] = []
    for pos, tok in re.findall(r"draft candidate +0, pos +(\d+): +(\d+)", out.stderr):
        if int(pos) == 0:
            drafts.append([])
        drafts[-1].append(int(tok))
    return drafts


@pytest.mark.skipif(peer.peer_binaries() is None, reason="llama.cpp peer not built (scripts/build_llama_cpp_peer.sh)")
@pytest.mark.parametrize("arch", ["qwen35-mtp", "qwen35-mtp-echo"])
def test_drafted_tokens_equal_llama_cpp_draft_mtp(tiny, arch):
    """Every draft equals the peer's (ours may be shorter at the end: -n counts differ by
    one and llama.cpp's MTP drafts its n_max whatever is left)."""
    sess = head_session(tiny[arch])
    toks, ours, st = run(sess, greedy("sd"))
    sess.close()
    # on a loaded machine the peer's -v log held fewer drafts (33-34 of 40 under a CPU hog,
    # all 40 on a quiet machine; the drafts it did log matched ours): cause not found (its
    # log is written by a background thread), so it is run again, up to 3 times
    for _ in range(3):
        theirs = peer_drafts(tiny[arch], PROMPT, N, 3)
        if len(theirs) >= len(ours):
            break
    assert len(ours) >= 10 and len(theirs) >= len(ours)
    for i, (a, b) in enumerate(zip(theirs, ours, strict=False)):
        assert a[: len(b)] == b, f"draft {i}: llama.cpp {a}, localspec {b}"
    assert sum(len(b) for b in ours) >= 3 * (len(ours) - 2)
    if arch == "qwen35-mtp-echo":
        assert st.proposed["mtp"][1] > 0


def test_sampled_runs_complete_and_repeat_by_seed(tiny):
    """T = 0.8: drafts are samples of the head's transformed softmax, verified by sd and gbv
    (exact for any q: tests/test_verify_exact.py); a seed gives the same text again."""
    sess = head_session(tiny["qwen35-mtp-echo"])
    for method in ("sd", "gbv"):
        total = drafted = 0
        for seed in range(4):
            cfg = GenConfig(method=method, K=1, L=4, n_predict=N, seed=seed, spec_type=("mtp",),
                            dynamic_draft=False, sampling=SamplingConfig(temp=0.8, top_k=40, top_p=0.95, min_p=0.05))
            toks, _, st = run(sess, cfg)  # it may sample the EOS early
            assert 0 < len(toks) <= N and run(sess, cfg)[0] == toks
            total, drafted = total + len(toks), drafted + st.proposed["mtp"][0]
        assert total > N and drafted > N // 2
    sess.close()


def test_first_token_law_at_t1_is_the_targets(tiny):
    """sd with MTP drafts at T = 1 emits the target's distribution: the first generated token
    (drafted by the head from the prompt's last token) over 300 one-token generations against
    the target's own transformed row, chi-square at p > 0.001."""
    from scipy.stats import chisquare

    from localspec.sampling import transform_row

    sess = head_session(tiny["qwen35-mtp-echo"])
    sampling = SamplingConfig(temp=1.0, top_k=8, top_p=1.0, min_p=0.0)
    toks = sess.tokenize(PROMPT)
    sess.target.sync(toks)
    sess.target.ctx.batch.clear().add(toks[-1], len(toks) - 1, 0, True)
    sess.target.ctx.decode()
    p = transform_row(sess.target.ctx.logits(0).copy(), sampling)
    sess.target.repair()
    counts = dict.fromkeys(p.ids.tolist(), 0)
    accepted = 0
    for seed in range(300):
        _, _, st = run(sess, GenConfig(method="sd", K=1, L=2, n_predict=1, seed=seed, spec_type=("mtp",),
                                       dynamic_draft=False, sampling=sampling), prompt=toks)
        counts[sess.last_tokens[0]] += 1
        accepted += st.accepted_lengths[0] > 0  # the head's first token was kept
    sess.close()
    assert sum(counts.values()) == 300 and 30 < accepted < 270  # both the accept and the resample path
    assert chisquare(list(counts.values()), 300 * p.probs).pvalue > 1e-3


def test_a_prompt_in_small_chunks_feeds_the_head_as_it_goes(tiny):
    """A prompt evaluated in 32-token chunks is fed to the head as the chunks come
    (backend/mtp.FLUSH), before its rows leave the ring: the head drafts what it drafts when
    the prompt is one chunk (the random head: every row it reads shapes its guesses)."""
    drafts = []
    for n_batch in (1024, 32):
        sess = head_session(tiny["qwen35-mtp"], n_batch=n_batch)
        toks, got, _ = run(sess, greedy("sd"), LONG)
        assert toks == ar_tokens(sess, LONG)
        drafts.append(got)
        sess.close()
    assert len(LONG) > 2 * (2 * 32 + 64 + 256) and drafts[0] == drafts[1]


def test_multi_turn_and_branch_copies_keep_ar_text(tiny):
    """A chat's second turn extends the history (the head follows the target across turns);
    a hybrid target without state snapshots (branch copies: a partly accepted block leaves
    tokens the target has not evaluated, and the head waits for them) gives AR's text."""
    for kw in ({}, {"rs_snapshots": 0}):
        sess = head_session(tiny["qwen35-mtp-echo"], **kw)
        toks, _, st = run(sess, greedy("sd"), LONG)
        assert toks == ar_tokens(sess, LONG) and st.proposed["mtp"][1] > 0
        answers = []
        for cfg in (greedy("sd"), GenConfig(method="ar", n_predict=N, sampling=SamplingConfig(temp=0.0))):
            sess.reset()
            answers.append([[e for e in sess.chat(text, cfg)][-1].text for text in ("Hello there.", "Paint a red robot.")])
        assert answers[0] == answers[1]
        sess.close()


def test_missing_nextn_symbols_fail_in_one_line(tiny, monkeypatch):
    from localspec.backend import mtp

    real = mtp.lookup_symbol
    monkeypatch.setattr(mtp, "lookup_symbol", lambda sym: None if "get_embeddings_nextn" in sym else real(sym))
    with pytest.raises(LocalspecError) as e:
        head_session(tiny["qwen35-mtp"])
    msg = str(e.value)
    assert "\n" not in msg and "llama_get_embeddings_nextn" in msg and "--spec-type draft" in msg
    assert "llama_set_embeddings_nextn" not in msg  # the one that exists is not blamed


def test_refusals_name_the_fix(tiny):
    with pytest.raises(ConfigError, match="-K 1"):
        GenConfig(method="sd", K=2, spec_type=("draft-mtp",)).validate()
    with pytest.raises(ConfigError, match="no MTP head") as e:
        RuntimeSession(Model(tiny["qwen35"], load_mtp=True), None, SessionOptions(n_ctx=256, threads=1, mtp=True))
    assert "\n" not in str(e.value)
    sess = RuntimeSession(Model(tiny["qwen35-mtp"]), None, SessionOptions(n_ctx=256, threads=1))
    with pytest.raises(ConfigError, match="SessionOptions\\(mtp=True\\)"):
        list(sess.generate(PROMPT, greedy("sd")))
    sess.close()
    with pytest.raises(ConfigError, match="-np 1"):  # refused before anything loads
        open_pool("nowhere.gguf", None, SessionOptions(mtp=True), 2)


def test_auto_with_mtp_runs_a_fixed_one_draft_verifier(tiny):
    """auto does not price the head: it runs sd (greedy) / gbv (sampled) with -L 3."""
    sess = head_session(tiny["qwen35-mtp-echo"])
    ref = ar_tokens(sess)
    toks, drafts, st = run(sess, GenConfig(method="auto", n_predict=N, sampling=SamplingConfig(temp=0.0),
                                           spec_type=("mtp",), auto_K=True, auto_L=True))
    assert toks == ref and st.method == "sd" and max(len(d) for d in drafts) == 3
    sampled = GenConfig(method="auto", n_predict=8, seed=1, spec_type=("mtp",), auto_K=True, auto_L=True,
                        sampling=SamplingConfig(temp=0.8))
    assert run(sess, sampled)[2].method == "gbv"
    sess.close()


def test_scratch_timings_are_not_history(tiny):
    """The cost model's scratch decodes on the target (a hybrid's scratch sequence is the
    draft sequence 1, from position 0) must not reach the head as target rows: a second
    chat turn timed in between drafts what it drafts without the timing."""
    from localspec import costmodel

    drafts = []
    for timed in (False, True):
        sess = head_session(tiny["qwen35-mtp"])  # a random head: every row it reads shapes its guesses
        list(sess.chat("Hello there.", greedy("sd")))
        if timed:
            costmodel.measure(sess.target.ctx, sizes=(1, 4), reps=1)
            assert sess.target.ctx.after_decode is not None  # the tap is back
        drafts.append([list(e.drafts[0]) for e in sess.chat("Paint a red robot.", greedy("sd"))
                       if isinstance(e, Drafted)])
        sess.close()
    assert drafts[0] == drafts[1] and len(drafts[0]) > 5


def test_the_proposer_samples_from_its_q_rows_and_leaves_only_history(tiny):
    """Each drafted token is drawn from the q row the verifier gets (a normalized
    transformed row); a stop rule ends a draft early; after a proposal the head holds the
    committed tokens alone (the chain's entries are gone)."""
    from localspec.decode.drafters.base import DraftRequest
    from localspec.decode.drafters.mtp import MtpDrafter
    from tests.support.helpers import FixedCutoff

    sess = head_session(tiny["qwen35-mtp-echo"])
    toks = sess.tokenize(PROMPT)
    sess.target.sync(toks)
    prop = MtpDrafter(sess.mtp, sess.target, SamplingConfig(temp=1.0, top_k=20), np.random.default_rng(0))
    full = prop.propose(DraftRequest(sess.target.committed, 1, 4))
    assert full is not None and full.source == "mtp" and full.L == 4 and full.draft_calls == 4
    for node, row in zip(full.nodes, full.q[0], strict=True):
        assert abs(row.probs.sum() - 1) < 1e-9 and row.prob_of(node.token) > 0 and row.ids.size > 1
    assert sess.mtp.tokens == toks and sess.mtp.n_decodes >= 4
    short = prop.propose(DraftRequest(sess.target.committed, 1, 4, FixedCutoff(1.01)))  # no row is that sure
    assert short is not None and short.L == 1 and sess.mtp.tokens == toks
    with pytest.raises(ConfigError, match="-K 1"):
        prop.propose(DraftRequest(sess.target.committed, 2, 4))
    sess.close()


def test_auto_drafts_with_the_head_when_no_draft_model_is_given(tiny, tmp_path, monkeypatch):
    """`auto` with a head and no -md: the runtime loads the head (SessionOptions.mtp None,
    what the CLI passes for auto) and auto prices it as a draft. On this CPU the tiny
    target's measured curve says no draft pays (8 tokens cost ~4x one): plain decoding,
    saying so. On a flat curve (a GPU's shape, put in here) it drafts with the head, whose
    step is then priced by its live time. Greedy text is AR's either way; with a draft model
    given, or on a target without a head, nothing extra is loaded."""
    from localspec.costmodel.curves import CostCurve
    from localspec.decode.drafters import mtp as mtp_mod
    from localspec.loading import open_session

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))  # the tiny model's curves, timed here
    monkeypatch.setattr(mtp_mod, "HEAD_COST_PRIOR", 0.01)
    opts = SessionOptions(n_ctx=2048, n_batch=256, threads=1, mtp=None)
    sess = open_session(str(tiny["qwen35-mtp-echo"]), None, opts)
    try:
        assert sess.mtp is not None and sess.target_model.load_mtp
        want = ar_tokens(sess)
        cfg = GenConfig(method="auto", auto_L=True, n_predict=N, sampling=SamplingConfig(temp=0.0))
        toks, _, st = run(sess, cfg)
        assert toks == want and "MTP head" in st.choice_note
        cm = sess.costs
        assert cm is not None
        if cm.target(9) > 2 * cm.target(1):  # the CPU's steep curve (what this machine measures)
            assert "mtp" not in st.proposed
        sizes = [1, 2, 4, 8, 16, 32, 64]
        cm.target = CostCurve(sizes, [0.01] * len(sizes))  # flat: verifying a block costs one step
        toks, drafts, st = run(sess, cfg)
        assert toks == want
        assert drafts and st.proposed.get("mtp", (0, 0))[0] > 0, (st.ran, st.choice_note)
        assert "by the MTP head" in st.ran
        assert 1 in cm.draft.healed and cm.draft(1) == cm.draft.healed[1] > 0  # its live step time, not the prior
        price = cm.draft
        assert run(sess, cfg)[0] == want and sess.costs.draft is price  # kept across turns, not re-primed
    finally:
        sess.close()
    for target, draft in ((tiny["qwen35-mtp-echo"], tiny["qwen35"]), (tiny["qwen35"], None)):
        s = open_session(str(target), str(draft) if draft else None, opts)
        try:
            assert s.mtp is None and not s.target_model.load_mtp
        finally:
            s.close()


def test_the_cli_loads_a_head_for_auto_only_when_nothing_else_is_named():
    from argparse import Namespace

    from localspec.flags.args import mtp_option

    assert mtp_option(Namespace(method="auto", spec_type=None)) is None
    assert mtp_option(Namespace(method="auto", spec_type=["mtp"])) is True
    assert mtp_option(Namespace(method="auto", spec_type=["ngram"])) is False
    assert mtp_option(Namespace(method="sd", spec_type=None)) is False
    assert mtp_option(Namespace()) is None  # a command without the flags: as auto


def test_nextn_layers_are_read_from_the_header(tiny):
    from localspec.models.gguf import nextn_layers

    assert nextn_layers(tiny["qwen35-mtp"]) == 1 and nextn_layers(tiny["qwen35"]) == 0
