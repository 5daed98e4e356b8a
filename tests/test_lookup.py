"""Prompt lookup (`--spec-type ngram`): drafts read off the turn's own text, verified losslessly.

The index and the proposer are checked directly; on SmolLM2 every lossless method with a
lookup draft, the lookup chained before the draft model, and `auto` without a draft model
must give AR's greedy text token for token, with partial acceptances among the iterations.
The enumeration that proves point-mass drafts exact is in tests/test_verify_exact.py.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.decode.drafters.base import DrafterBase, DraftRequest
from localspec.decode.drafters.combine import ChainDrafter
from localspec.decode.drafters.lookup import (
    RUN_CAP,
    NgramDrafter,
    NgramIndex,
    Regions,
    agreement,
    regions_of,
)
from localspec.errors import ConfigError

CODE = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
        "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n    return a / b\n")
EOG = -1  # the law test's cell for "the answer ended here"
EDIT = [{"role": "user", "content": "Return this code exactly as it is, with a docstring added to each "
         "function:\n\n" + CODE}]


def test_the_longest_latest_match_wins():
    idx = NgramIndex(2, 4)
    h = [1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3]
    idx.extend(h)
    # tail 1 2 3: matched at 4 (latest earlier start), continuation 7 5 ...
    assert idx.continuation(3) == ([7, 5, 1], 3)
    idx.extend([*h, 7])  # grown: tail 2 3 7 occurred at 5 -> 5 1 2 3
    assert idx.continuation(2) == ([5, 1], 4)
    idx.extend([4, 4])  # not an extension: a new history
    assert idx.history == [4, 4] and idx.continuation(5) == ([], 0)


def test_a_match_knows_how_far_back_its_copy_agrees():
    """`run`: how many tokens before the match's continuation agree with the history's tail,
    beyond the n-gram matched (auto bets longer inside a long copy), capped at RUN_CAP."""
    idx = NgramIndex(2, 4)
    text = [50, 51, 52, 53, 54, 55, 56, 57]
    idx.extend([*text, 9, *text[:6]])  # the answer re-writes 6 tokens of `text`
    assert idx.continuation(2) == ([56, 57], 4) and idx.run == 6
    idx.extend([*text, 9, 1, 54, 55])  # a 2-gram only: 53 != 1
    assert idx.continuation(1) == ([56], 2) and idx.run == 2
    long = list(range(100, 200))
    idx.extend([*long, *long[:60]])
    assert idx.continuation(1) == ([160], 4) and idx.run == RUN_CAP
    assert agreement([1, 2, 3, 4], 3, [0, 2, 3]) == 2 and agreement([1, 2, 3, 4], 3, [9]) == 0
    idx.extend([1, 2, 3])  # no match: no run
    assert idx.continuation(4) == ([], 0) and idx.run == 0


def test_a_lookup_stops_before_a_control_token():
    """A continuation never crosses the barrier (the model's control and end-of-generation
    tokens): a prompt's last lines go on into the chat template's end-of-turn marker, which an
    answer never writes there. A match whose continuation starts with one is no match, and a
    shorter match elsewhere is tried."""
    idx = NgramIndex(2, 4, barrier=frozenset({99}))
    idx.extend([1, 2, 3, 4, 99, 5, 1, 2])
    assert idx.continuation(5) == ([3, 4], 2)
    idx.extend([7, 8, 99, 5, 6, 7, 8])
    assert idx.continuation(5) == ([], 0) and idx.at == -1
    idx.extend([6, 7, 8, 99, 1, 7, 8, 5, 6, 7, 8])  # (6 7 8) goes on into 99; (7 8) at 5 does not
    assert idx.continuation(2) == ([5, 6], 2)
    assert NgramIndex(2, 4).continuation(5) == ([], 0)


def test_the_turns_lookup_stops_at_the_models_control_tokens(smol):
    from localspec.decode.drafters.lookup import lookup_barrier

    s, _ = smol
    model = s.target_model
    ids = model.control_ids
    im_end = model.tokenize("<|im_end|>", parse_special=True)
    assert len(im_end) == 1 and im_end[0] in ids and model.eos in ids
    assert not any(t in ids for t in model.tokenize("def add(a, b):", parse_special=False))

    class _Turn:
        target_model = model

    barrier = lookup_barrier(_Turn())  # what the turn's lookup is built with: the model's control tokens
    assert im_end[0] in barrier and model.eos in barrier
    assert not any(t in barrier for t in model.tokenize("def add(a, b):", parse_special=False))
    assert -1 not in ids and model.n_vocab + 5 not in ids


def test_extending_equals_indexing_at_once():
    rng = np.random.default_rng(0)
    h = [int(t) for t in rng.integers(0, 4, size=200)]
    step, once = NgramIndex(2, 5), NgramIndex(2, 5)
    for i in range(1, len(h) + 1, 7):
        step.extend(h[:i])
    step.extend(h)
    once.extend(h)
    assert step.starts == once.starts
    for n in range(2, 6):  # every indexed start is the latest one with a continuation
        for key, s in once.starts.items():
            if len(key) == n:
                later = [j for j in range(s + 1, len(h) - n) if tuple(h[j:j + n]) == key]
                assert not later and tuple(h[s:s + n]) == key


def test_a_lookup_draft_is_a_point_mass_chain():
    p = NgramDrafter(2, 3)
    assert p.propose(DraftRequest([5, 6, 7], 1, 4)) is None  # nothing repeats yet
    trie = p.propose(DraftRequest([5, 6, 7, 8, 5, 6], 1, 4))
    assert trie is not None and p.matched == 2
    assert [n.token for n in trie.nodes] == [7, 8, 5, 6] and trie.path == [[0, 1, 2, 3]]
    assert all(r.ids.tolist() == [t] and r.probs.tolist() == [1.0] for r, t in zip(trie.q[0], [7, 8, 5, 6], strict=True))
    assert trie.source == "ngram" and trie.draft_calls == 0


def test_a_lookup_tells_whether_it_copies_the_prompt_or_the_answer():
    """The turn's prompt is 5 6 7 8 9 (answer_start 5): a match whose continuation starts in
    it is a PROMPT bet, one that continues the answer's own earlier tokens an ANSWER bet; the
    chain and the stack pass it on (auto's gate keys by it)."""
    p = NgramDrafter(2, 3, Regions(5))
    assert p.propose(DraftRequest([5, 6, 7, 8, 9, 5, 6], 1, 4)) is not None and p.origin == "prompt"
    # the answer repeats itself: 1 2 3 ... 1 2 -> continues with the answer's 3
    assert p.propose(DraftRequest([5, 6, 7, 8, 9, 1, 2, 3, 1, 2], 1, 4)) is not None and p.origin == "answer"
    assert p.propose(DraftRequest([5, 6, 7, 8, 9, 4], 1, 4)) is None and p.origin == ""
    chain = ChainDrafter([NgramDrafter(2, 3, Regions(5))])
    chain.propose(DraftRequest([5, 6, 7, 8, 9, 5, 6], 1, 4))
    assert chain.origin == "prompt"


def test_a_fim_prompt_has_a_prefix_and_a_suffix():
    """[PRE] 1 2 3 [SUF] 4 5 6 [MID]: a continuation before the suffix token is the prefix's,
    between it and the middle token the suffix's; a prompt without them has neither."""
    PRE, SUF, MID = 90, 91, 92
    prompt = [PRE, 1, 2, 3, SUF, 4, 5, 6, MID]
    r = regions_of(prompt, SUF, MID)
    assert r == Regions(9, (5, 8))
    assert [r.origin(i) for i in (1, 4, 5, 7, 8, 9, -1)] == ["prefix", "prefix", "suffix", "suffix", "prefix", "answer", ""]
    assert regions_of(prompt, -1, -1) == Regions(9) and regions_of([1, 2, SUF, 3], SUF, MID) == Regions(4)
    p = NgramDrafter(2, 3, r)
    p.propose(DraftRequest([*prompt, 4, 5], 1, 4))  # the answer begins like the suffix
    assert p.origin == "suffix" and p.matched == 2
    p.propose(DraftRequest([*prompt, 1, 2], 1, 4))
    assert p.origin == "prefix"


def test_a_chain_drafts_with_the_first_that_has_a_draft():
    class Fixed(DrafterBase):
        name, kind = "fixed", "model"

        def __init__(self):
            self.proposed = 0

        def propose(self, req):
            self.proposed += 1
            return "from-draft"

    fixed = Fixed()
    chain = ChainDrafter([NgramDrafter(2, 3), fixed])
    assert chain.propose(DraftRequest([1, 2, 3], 1, 4)) == "from-draft" and chain.last is fixed
    assert chain.propose(DraftRequest([1, 2, 3, 1, 2], 1, 4)) is not None and isinstance(chain.last, NgramDrafter)
    assert fixed.proposed == 1  # the draft model was not asked while the lookup had one


def test_spec_type_is_checked():
    for bad in (("nonsense",), ()):
        with pytest.raises(ConfigError, match="--spec-type"):
            GenConfig(spec_type=bad).validate()
    with pytest.raises(ConfigError, match="one continuation"):
        GenConfig(method="mdbv", K=2, spec_type=("ngram",)).validate()
    cfg = GenConfig(spec_type=("ngram-simple", "draft-simple"))
    cfg.validate()
    assert cfg.spec_type == ("ngram", "draft")  # llama.cpp's names are accepted
    with pytest.raises(ConfigError, match="--spec-ngram"):
        GenConfig(ngram_min=5, ngram_max=3).validate()


def test_the_gate_prices_lookups_by_the_curve_and_what_they_did():
    """On a steep CPU curve (8 tokens cost 4.5x one) an unexplored match length is tried
    (optimism), a length that keeps failing is not, one that keeps succeeding drafts long;
    on a flat (GPU-like) curve even a mediocre lookup pays."""
    from localspec.costmodel import CostCurve
    from localspec.costmodel.lookup import LookupGate

    steep = CostCurve([1, 2, 4, 8, 16], [0.028, 0.047, 0.072, 0.127, 0.148])
    gate = LookupGate()
    assert gate.best_length(steep, 5, 16)[0] > 0  # nothing known about 5-token matches: try
    for _ in range(20):
        gate.update(2, 0, 8)  # 2-token matches: always rejected at once
        gate.update(8, 8, 8)  # 8-token matches: always right
    assert gate.best_length(steep, 2, 16) == (0, 1.0)
    L, speedup = gate.best_length(steep, 8, 16)
    assert L >= 8 and speedup > 1.5
    assert gate.alpha(2) < 0.1 < 0.9 < gate.alpha(8)
    flat = CostCurve([1, 64], [0.010, 0.012])
    mediocre = LookupGate()
    for _ in range(20):
        mediocre.update(3, 1, 4)
    assert mediocre.best_length(flat, 3, 16)[0] > 0 and mediocre.best_length(steep, 3, 16) == (0, 1.0)


# ---------------------------------------------------------------- on a real model
def greedy(method: str, **kw) -> GenConfig:
    cfg = GenConfig(method=method, n_predict=kw.pop("n", 96), seed=1, sampling=SamplingConfig(temp=0.0),
                    dynamic_draft=False, **kw)
    cfg.validate()
    return cfg


@pytest.fixture(scope="module")
def smol(smollm2_path, smollm2_q4_0_path):
    from tests.support.helpers import session

    s = session(smollm2_path, smollm2_q4_0_path)
    ref = list(s.generate(EDIT, greedy("ar")))[-1]
    return s, ref


@pytest.mark.parametrize("method", ["sd", "gbv", "spectr", "mdbv"])
def test_lookup_drafts_give_ar_text(smol, method):
    s, ref = smol
    events = list(s.generate(EDIT, greedy(method, L=6, spec_type=("ngram",))))
    done = events[-1]
    st = done.stats
    assert done.text == ref.text and s.last_tokens == s.last_tokens
    assert st.lookup_drafted > 0 and st.draft_calls == 0  # no model drafted
    assert set(sources_agree_with_stats(events, st)) == {"ngram"}  # every draft event says so
    assert any(0 < t < 6 for t in st.accepted_lengths) and st.target_calls < st.n_tokens


def sources_agree_with_stats(events: list, stats) -> dict[str, int]:
    """Every iteration's draft events name one proposer, and per proposer the accepted
    lengths they carry add up to what Stats.proposed counted (the draft model's: the rest).
    Returns the iterations per source."""
    from localspec.events import Accepted, Drafted, Rejected

    iters: dict[str, int] = {}
    taus: dict[str, int] = {}
    now = None
    for ev in events:
        if isinstance(ev, Drafted):
            now = ev.source
            iters[now] = iters.get(now, 0) + 1
        elif isinstance(ev, (Accepted, Rejected)):
            assert ev.source == now, (ev, now)  # the iteration's Drafted named the same proposer
            if isinstance(ev, Accepted):
                taus[now] = taus.get(now, 0) + ev.tau
    for k, (_, accepted) in stats.proposed.items():
        assert taus.get(k, 0) == accepted, (k, taus, stats.proposed)
    assert taus.get("draft", 0) == sum(stats.accepted_lengths) - stats.lookup_accepted
    return iters


def test_lookup_chained_before_the_draft_model_gives_ar_text(smol):
    s, ref = smol
    events = list(s.generate(EDIT, greedy("gbv", L=5, spec_type=("ngram", "draft"))))
    done = events[-1]
    st = done.stats
    assert done.text == ref.text
    assert 0 < st.lookup_drafted < st.drafted and st.draft_calls > 0  # both proposers drafted
    j = done.stats.to_json()["proposers"]
    assert j["ngram"]["drafted"] == st.lookup_drafted and j["draft"]["drafted"] == st.drafted - st.lookup_drafted
    assert j["ngram"]["acceptance"] == pytest.approx(st.lookup_accepted / st.lookup_drafted)
    # the events name who drafted: both proposers show up, each with its own accepted spans
    iters = sources_agree_with_stats(events, st)
    assert iters.get("ngram", 0) > 0 and iters.get("draft", 0) > 0 and set(iters) == {"ngram", "draft"}


def test_a_stack_is_one_lookup_and_the_draft_model():
    cfg = GenConfig(method="sd", K=2, spec_type=("draft+ngram-simple",))
    cfg.validate()
    assert cfg.spec_type == ("ngram+draft",) and cfg.stacked and cfg.kinds == {"ngram", "draft"}
    assert cfg.needs_draft_model
    for bad in (("ngram+suffix",), ("draft+draft",), ("ngram+draft+suffix",)):
        with pytest.raises(ConfigError, match="a stack is one lookup and the draft model"):
            GenConfig(spec_type=bad).validate()
    with pytest.raises(ConfigError, match="only rrs verifies exactly"):
        GenConfig(method="spectr-gbv", K=2, spec_type=("ngram+draft",)).validate()
    with pytest.raises(ConfigError, match="ngram\\+draft"):  # the error names the stack as the way out
        GenConfig(method="mdbv", K=2, spec_type=("ngram",)).validate()


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
@pytest.mark.parametrize("method,K", [("sd", 1), ("mdbv", 2)])
def test_stacked_lookup_and_draft_in_one_pass_give_ar_text(smol, method, K):
    """--spec-type ngram+draft: the lookup's draft and the model's K drafts are scored in ONE
    target decode per iteration (fewer target calls than either alone needs) and verified by
    rrs; at T = 0 the text is AR's."""
    s, ref = smol
    done = list(s.generate(EDIT, greedy(method, K=K, L=5, spec_type=("ngram+draft",))))[-1]
    st = done.stats
    assert done.text == ref.text
    assert st.proposed["ngram"][0] > 0 and st.draft_calls > 0  # both drafted
    assert st.proposed["ngram"][1] > 0  # and the lookup's draft won some iterations
    assert st.target_calls == st.iterations < st.n_tokens  # one target pass per iteration
    from localspec.events import Accepted

    evs = list(s.generate(EDIT, greedy(method, K=K, L=5, spec_type=("ngram+draft",))))
    by = {ev.source for ev in evs if isinstance(ev, Accepted) and ev.tokens}
    assert by == {"ngram", "draft"}  # each kept span names the proposer that drafted it


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_auto_without_a_draft_model_uses_lookups_where_the_gate_says_they_pay(smollm2_path, monkeypatch, tmp_path):
    """No -md: auto prices lookups with the target's curve; under a curve where verifying
    more tokens is nearly free (a GPU's, a big memory-bound target's) it drafts by lookup,
    under this CPU's real SmolLM2 curve it may not -- either way the text is AR's."""
    from localspec import costmodel
    from localspec.costmodel import CostCurve
    from tests.support.helpers import session

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    s = session(smollm2_path)
    ref = list(s.generate(EDIT, greedy("ar")))[-1]
    cfg = GenConfig(method="auto", n_predict=96, seed=1, sampling=SamplingConfig(temp=0.0), auto_K=True, auto_L=True)
    real = list(s.generate(EDIT, cfg))[-1]
    assert real.text == ref.text and real.stats.draft_calls == 0
    flat = CostCurve([1, 64], [0.010, 0.012])  # verifying 64 tokens costs 1.2x one
    monkeypatch.setattr(costmodel, "load_curve", lambda ctx: flat)
    s.costs = None
    assert "shipped prior" in s.explain(cfg)  # nothing learned: --explain shows what it starts from
    paid = list(s.generate(EDIT, cfg))[-1]
    assert paid.text == ref.text
    assert paid.stats.lookup_drafted > 0 and "ngram" in paid.stats.ran
    assert paid.stats.target_calls < ref.stats.target_calls
    # --explain now prints what the gate learned this session, per match length and origin, priced on the curve
    said, gate = s.explain(cfg), s.costs.lookup
    assert "no lookup evidence yet" not in said and gate.trials
    for key, trials in gate.trials.items():
        row = next(ln.split() for ln in said.splitlines() if ln.split()[:2] == [str(key[1]), key[2]])
        assert row[4] == f"{gate.accepted[key]:.0f}/{trials:.0f}" and row[5].startswith(("L=", "none"))


def test_auto_with_a_draft_model_picks_lookup_or_draft_per_iteration(smollm2_path, smollm2_q4_0_path,
                                                                     monkeypatch, tmp_path):
    """With -md and curves under which the draft model pays (flat: a GPU's), auto still lets
    the lookup draft the iterations where its gate predicts more than the draft model's
    setting (an edit repeats the prompt): both proposers write the answer, which is AR's."""
    from localspec import costmodel
    from localspec.costmodel import CostCurve
    from tests.support.helpers import session

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    flat = CostCurve([1, 64], [0.010, 0.012])
    cheap = CostCurve([1, 64], [0.001, 0.002])  # the draft model's steps
    monkeypatch.setattr(costmodel, "load_curve", lambda ctx: cheap if "Q4_0" in ctx.model.path.name else flat)
    monkeypatch.setattr(CostCurve, "observe", lambda self, n, sec, pos=None: None)  # the curves stay as given
    s = session(smollm2_path, smollm2_q4_0_path)
    ref = list(s.generate(EDIT, greedy("ar")))[-1]
    cfg = GenConfig(method="auto", n_predict=96, seed=1, sampling=SamplingConfig(temp=0.0), auto_K=True, auto_L=True)
    done = list(s.generate(EDIT, cfg))[-1]
    st = done.stats
    assert done.text == ref.text
    assert st.draft_calls > 0 and st.proposed.get("ngram", (0, 0))[0] > 0, (st.ran, st.proposed)
    assert st.ran.startswith("sd") and " then ar" not in st.ran  # the draft model's phase throughout


# snapshot rollback; branch + catch-up; a sliding window of 8 tokens that a 24-token draft crosses
@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "gemma3"])
@pytest.mark.parametrize("L", [4, 24])  # 24: past the state's snapshots and the window (auto's long-copy bets)
def test_lookups_on_each_memory_kind_keep_ar_text(tiny, arch, L):
    from tests.support.helpers import session

    s = session(tiny[arch])
    prompt = "one two three four five six seven one two three four five six seven one two"
    ref = list(s.generate(prompt, greedy("ar", n=40)))[-1]
    done = list(s.generate(prompt, greedy("sd", n=40, L=L, spec_type=("ngram",))))[-1]
    assert done.text == ref.text and done.stats.lookup_drafted > 0


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localspec.cli", *args], capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)


def test_cli_lookup_without_a_draft_model(smollm2_path):
    r = cli("run", "-m", str(smollm2_path), "-p", "a b c d a b c d a b", "-n", "8", "--temp", "0",
            "--method", "sd", "--spec-type", "ngram")
    assert r.returncode == 0, r.stderr
    bad = cli("run", "-m", str(smollm2_path), "-p", "hi", "--spec-type", "eagle9")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--spec-type" in bad.stderr
    nodraft = cli("run", "-m", str(smollm2_path), "-p", "hi", "--method", "sd")
    assert nodraft.returncode == 2 and "--spec-type ngram" in nodraft.stderr


# 1,500 seeds (was 2,000): chi2_pvalue pools the cells under 5 expected counts either way,
# and the two tests run ~2.5 min shorter
LAW_SEEDS = 1500


@pytest.mark.slow
@pytest.mark.law
def test_lookup_chained_with_the_draft_keeps_the_target_law(smollm2_path, smollm2_q4_0_path):
    """chi-square on the first two tokens at T = 1 (tests/test_lossless_real.py's test) with
    `--spec-type ngram,draft` and gbv: the history holds an earlier answer, so the lookup
    drafts the first tokens (a point mass) and the draft model the rest."""
    from tests.support.helpers import session
    from tests.test_lossless_real import chi2_pvalue

    sampling = SamplingConfig(temp=1.0, top_k=6, top_p=1.0, min_p=0.0)
    history = [{"role": "user", "content": "Say a color."}, {"role": "assistant", "content": "Blue."},
               {"role": "user", "content": "Say a color."}]
    s = session(smollm2_path, smollm2_q4_0_path)
    law = _two_token_law(s, history, sampling)
    pairs, looked_up = [], 0
    for seed in range(LAW_SEEDS):
        cfg = GenConfig(method="gbv", K=1, L=2, n_predict=2, seed=seed, sampling=sampling, dynamic_draft=False,
                        spec_type=("ngram", "draft"))
        done = list(s.generate(history, cfg))[-1]
        looked_up += done.stats.lookup_drafted > 0
        got = s.last_tokens[:2]
        pairs.append((got[0], got[1] if len(got) > 1 else EOG))  # stopped at the end of its turn
    assert looked_up > LAW_SEEDS // 2  # the lookup drafted in most generations
    assert chi2_pvalue(pairs, law) > 1e-3


@pytest.mark.slow
@pytest.mark.law
def test_stacked_lookup_and_draft_keep_the_target_law(smollm2_path, smollm2_q4_0_path):
    """chi-square on the first two tokens at T = 1 with `--spec-type ngram+draft`: the
    lookup's point mass (the earlier answer) and the draft model's sample in one trie,
    verified by rrs (each draft its own q)."""
    from tests.support.helpers import session
    from tests.test_lossless_real import chi2_pvalue

    sampling = SamplingConfig(temp=1.0, top_k=6, top_p=1.0, min_p=0.0)
    history = [{"role": "user", "content": "Say a color."}, {"role": "assistant", "content": "Blue."},
               {"role": "user", "content": "Say a color."}]
    s = session(smollm2_path, smollm2_q4_0_path)
    law = _two_token_law(s, history, sampling)
    pairs, stacked = [], 0
    for seed in range(LAW_SEEDS):
        cfg = GenConfig(method="sd", K=1, L=2, n_predict=2, seed=seed, sampling=sampling, dynamic_draft=False,
                        spec_type=("ngram+draft",))
        done = list(s.generate(history, cfg))[-1]
        stacked += done.stats.proposed.get("ngram", (0, 0))[0] > 0
        got = s.last_tokens[:2]
        pairs.append((got[0], got[1] if len(got) > 1 else EOG))
    assert stacked > LAW_SEEDS // 2  # the lookup's draft sat beside the model's in most generations
    assert chi2_pvalue(pairs, law) > 1e-3


def _two_token_law(s, history, sampling) -> dict:
    """The target's exact law of its first two tokens after `history` (EOG for a stop)."""
    from localspec.backend import Context
    from localspec.sampling import transform_row

    toks = s._prompt_tokens(s.render(history))
    ctx = Context(s.target_model, n_ctx=512, n_batch=512, n_seq_max=1, threads=1)
    row = ctx.batch.clear().add_sequence(toks, 0, 0, True)
    ctx.decode()
    first = transform_row(np.array(ctx.logits(row)), sampling)
    law: dict = {}
    for t1, p1 in zip(first.ids.tolist(), first.probs.tolist(), strict=True):
        r = ctx.batch.clear().add(t1, len(toks), 0, True)
        ctx.decode()
        second = transform_row(ctx.logits(r), sampling)
        for t2, p2 in zip(second.ids.tolist(), second.probs.tolist(), strict=True):
            key = (t1, EOG if s.target_model.is_eog(t2) else t2)
            law[key] = law.get(key, 0.0) + p1 * p2
        ctx.seq_rm(0, len(toks), -1)
    ctx.close()
    return law


def test_a_turn_on_a_fim_model_marks_its_fim_prompt():
    """turn_regions reads the target's FIM ids: a FIM prompt gets its suffix span, a chat
    prompt on the same model none, a model without FIM tokens none."""
    from types import SimpleNamespace as NS

    from localspec.backend.fim import FimTokens
    from localspec.decode.drafters.lookup import turn_regions

    fim = FimTokens(pre=90, suf=91, mid=92)
    prompt = [90, 1, 2, 91, 3, 4, 92]

    def turn(tokens, tokens_fim):
        return NS(target_model=NS(fim=tokens_fim), target=NS(committed=[*tokens, 7, 8]), answer_start=len(tokens))

    assert turn_regions(turn(prompt, fim)) == Regions(7, (4, 6))
    assert turn_regions(turn([1, 2, 3], fim)) == Regions(3)
    assert turn_regions(turn(prompt, FimTokens())) == Regions(7)
