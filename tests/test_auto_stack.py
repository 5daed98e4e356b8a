"""auto's stacks (decode/policy/stack.py): the lookup's draft beside the draft model's in one
trie, chosen per iteration from a gain the draft-model iterations teach for free.

The arithmetic is checked directly (what a draft-model iteration implies a stack would
have added; when the gain buys the extra verify rows); on SmolLM2, under curves where
verifying more tokens is nearly free, auto stacks some iterations of an edit and writes
AR's text with one target pass per iteration.
"""

from __future__ import annotations

import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.costmodel import CostCurve
from localspec.costmodel.lookup import LookupGate, counterfactual_gain
from tests.test_lookup import EDIT, greedy, sources_agree_with_stats


def test_a_lookup_adds_only_where_it_matched_every_emitted_token():
    emitted = [5, 6, 7]  # two accepted draft tokens and the target's own
    assert counterfactual_gain([5, 6, 8, 9], emitted, 0.5) == 0.0  # wrong where the target spoke
    assert counterfactual_gain([5, 6], emitted, 0.5) == 0.0  # too short to run past the draft
    assert counterfactual_gain([5, 6, 7], emitted, 0.5) == 1.0  # one more token, nothing after it
    # one more, and alpha + alpha^2 expected of the two tokens it still had
    assert counterfactual_gain([5, 6, 7, 1, 2], emitted, 0.5) == pytest.approx(1.75)


def test_a_stack_pays_when_its_gain_buys_the_extra_rows():
    gate = LookupGate()
    key = ("ngram", 4)
    flat = CostCurve([1, 64], [0.010, 0.012])
    steep = CostCurve([1, 64], [0.010, 0.640])  # every verified token costs a step
    # no evidence: the gain starts at zero tokens and nothing is stacked
    assert gate.stack_gain(key) == 0.0 and not gate.stack_pays(flat, key, 3.0, 0.05, 9, 8)
    for _ in range(8):
        gate.teach_gain(key, 2.0)
    assert gate.stack_gain(key) == pytest.approx(1.6)  # 16 tokens over 2 prior + 8 iterations
    assert gate.stack_pays(flat, key, 3.0, 0.05, 9, 8)
    assert not gate.stack_pays(steep, key, 3.0, 0.05, 9, 8)  # 8 rows cost 0.08 s: 4.6/0.13 < 3/0.05
    assert not gate.stack_pays(flat, key, 3.0, 0.05, 9, 0)  # nothing to add
    for _ in range(200):
        gate.teach_gain(key, 0.0)  # the lookup stopped running past the draft: 16 / 210 tokens
    assert not gate.stack_pays(flat, key, 3.0, 0.05, 9, 8)


@pytest.fixture(scope="module")
def smollm2_q2k_path(smollm2_path, tmp_path_factory):
    """SmolLM2 requantized to Q2_K (pure, ~3 s): a draft the target rejects often on the
    edit, where the lookup is still right (the Q4_0 draft is rejected ~3 times in 59 tokens
    of it, which leaves a stack nothing to add)."""
    from localspec.backend.quantize import quantize

    return quantize(smollm2_path, tmp_path_factory.mktemp("q2k") / "smollm2-q2k.gguf", "Q2_K",
                    progress=False, pure=True)


def assert_targets_answer(s, target_path, ref_events, events) -> None:
    """The text is the target's greedy answer (AR's), up to llama.cpp's batch numerics: a
    verification evaluates positions in other batch shapes than AR, and an argmax may flip
    where two logits nearly tie (docs/design.md#numerics) -- any divergence must be one."""
    from localspec.events import Accepted, Written
    from tests.test_speculative import first_divergence_gap

    def tokens(evs) -> list[int]:
        return [t for e in evs if isinstance(e, Accepted | Written) for t in e.tokens]

    if events[-1].text == ref_events[-1].text:
        return
    prompt = s._prompt_tokens(s.template.render(EDIT))
    gap = first_divergence_gap(None, target_path, tokens(ref_events), tokens(events), prompt)
    assert gap is not None and gap < 1.0, f"diverged from AR's greedy answer with a logit gap of {gap}"


def _auto(smollm2_path, draft_path, monkeypatch, tmp_path, target_curve: CostCurve, **kw):
    from localspec import costmodel
    from tests.support.helpers import session

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    # the lookup never bets alone (as where its matches are short beside the draft model's):
    # every iteration is the draft model's, with or without the lookup stacked on it
    monkeypatch.setattr(LookupGate, "best_length", lambda self, curve, n, longest, explore=True: (0, 1.0))
    cheap = CostCurve([1, 64], [0.001, 0.002])  # the draft model's steps: it pays
    monkeypatch.setattr(costmodel, "load_curve",
                        lambda ctx: cheap if ctx.model.path == draft_path else target_curve)
    monkeypatch.setattr(CostCurve, "observe", lambda self, n, sec, pos=None: None)  # the curves stay as given
    s = session(smollm2_path, draft_path)
    ref = list(s.generate(EDIT, greedy("ar")))
    kw = {"auto_K": True, "auto_L": True} | kw
    cfg = GenConfig(method="auto", n_predict=96, seed=1, sampling=SamplingConfig(temp=0.0), **kw)
    events = list(s.generate(EDIT, cfg))
    return s, ref, events, cfg


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
@pytest.mark.parametrize("spec_type", [None, ("ngram+draft",)])
def test_auto_stacks_where_the_verify_rows_are_nearly_free(smollm2_path, smollm2_q2k_path, monkeypatch, tmp_path,
                                                           spec_type):
    """A flat target curve (a GPU's): the draft model drafts every iteration, the lookup
    matches the prompt's code, its counterfactuals teach a gain, and auto stacks where that
    gain pays for the extra rows (by default, and with --spec-type ngram+draft); the text is AR's,
    one target pass per iteration, and the stacked iterations are counted and named."""
    flat = CostCurve([1, 64], [0.010, 0.012])
    s, ref, events, cfg = _auto(smollm2_path, smollm2_q2k_path, monkeypatch, tmp_path, flat, spec_type=spec_type)
    done = events[-1]
    st = done.stats
    assert_targets_answer(s, smollm2_path, ref, events)
    assert st.stacked > 0 and "stacks" in st.ran, (st.ran, st.stacked)
    assert st.stacked < st.iterations  # not every one: first the gain has to be learned
    assert st.target_calls == st.iterations < st.n_tokens
    assert st.to_json()["stacked"] == st.stacked
    gate = s.costs.lookup
    assert any(gate.stack_gain(k) > 0 for k in gate.gain)  # learned, and what it stacked on
    # --explain says what it learned, per match length and origin
    said = next(ln for ln in s.explain(cfg).splitlines() if "stacked beside the draft model" in ln)
    for key in gate.gain:
        where = f"match {key[1]} in the {key[2]}" + (" inside a long copy" if "long" in key[3:] else "")
        assert f"{where}: +{gate.stack_gain(key):.2f} (n={gate.gain_trials[key]:.0f})" in said
    iters = sources_agree_with_stats(events, st)  # each kept span names who drafted it
    assert iters.get("draft", 0) > 0


def test_auto_does_not_stack_where_verified_rows_cost_more_than_they_add(smollm2_path, smollm2_q2k_path, monkeypatch,
                                                                     tmp_path):
    """The same pair and edit on a curve where a verified token costs a seventh of a step
    (a CPU's): the draft model still pays and the gain is still learned, but it never buys
    the lookup's long continuations (at most a short tail of a row or two). (Uninformed lookup priors: the counterfactual gain is priced on the
    gate's alpha, and the shipped 0.98 for 8-gram matches makes a stack pay on this curve.)"""
    from localspec.costmodel import priors

    monkeypatch.setattr(priors, "_enabled", False)
    priced: list[tuple[int, bool]] = []  # (the lookup's extra rows, bought) per stack priced
    real = LookupGate.stack_pays

    def recording(self, target, n, tokens, seconds, block, extra):
        paid = real(self, target, n, tokens, seconds, block, extra)
        priced.append((extra, paid))
        return paid

    monkeypatch.setattr(LookupGate, "stack_pays", recording)
    steep = CostCurve([1, 64], [0.010, 0.100])
    s, ref, events, cfg = _auto(smollm2_path, smollm2_q2k_path, monkeypatch, tmp_path, steep)
    st = events[-1].stats
    assert_targets_answer(s, smollm2_path, ref, events)
    assert st.ran.startswith("sd") and st.drafted > 0, st.ran  # the draft model drafted
    assert any(s.costs.lookup.stack_gain(k) > 0 for k in s.costs.lookup.gain)
    # the lookup's long continuations were priced and never bought; a tail of a row or two
    # beyond the draft's block (2 rows cost 2.9 ms against a 10 ms step) may be
    assert any(extra >= 8 for extra, _ in priced)
    assert not any(paid for extra, paid in priced if extra >= 8), priced
    assert st.stacked == sum(paid for _, paid in priced) <= 2, st.ran


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_auto_with_a_chain_asked_for_drafts_one_proposer_per_iteration(smollm2_path, smollm2_q2k_path,
                                                                        monkeypatch, tmp_path):
    """--spec-type ngram,draft is a chain: auto never stacks its two, even where it would pay."""
    flat = CostCurve([1, 64], [0.010, 0.012])
    s, ref, events, cfg = _auto(smollm2_path, smollm2_q2k_path, monkeypatch, tmp_path, flat,
                           spec_type=("ngram", "draft"))
    st = events[-1].stats
    assert_targets_answer(s, smollm2_path, ref, events)
    assert st.drafted > 0 and st.stacked == 0 and "stacks" not in st.ran, st.ran
    # the forecast priced every iteration: at least one token each, at most its whole draft and
    # the target's own; each at least a target step on the given curve (costmodel/forecast.py)
    tokens, seconds = st.forecast
    assert st.iterations <= tokens <= st.iterations + st.drafted
    assert seconds >= st.iterations * flat(1)


def test_no_stack_where_either_model_keeps_a_recurrent_state():
    """A stack is two drafts: auto never considers one with a hybrid or recurrent target or
    draft (the rule --spec-type X+draft meets in decode/plan.fit_memory), nor without a
    draft model, nor with the MTP head."""
    from types import SimpleNamespace as NS

    from localspec.backend.memory import Memory
    from localspec.decode.drafters.model import ModelDrafter
    from localspec.decode.drafters.mtp import MtpDrafter
    from localspec.decode.policy.stack import AutoStack
    from localspec.decode.state import KVState

    def turn(target: Memory, draft: Memory | None):  # the memories answer what they allow
        def state(m: Memory) -> KVState:
            return KVState(NS(memory=m, n_seq_max=4))  # type: ignore[arg-type]

        return NS(target=state(target), draft=None if draft is None else state(draft))

    model = ModelDrafter(NS(), SamplingConfig(temp=0.0), None)  # type: ignore[arg-type]
    head = MtpDrafter(None, None, SamplingConfig(temp=0.0), None)  # type: ignore[arg-type]
    A, S, H, R = Memory.ATTENTION, Memory.SLIDING_WINDOW, Memory.HYBRID, Memory.RECURRENT
    assert AutoStack.possible(turn(A, A), model) and AutoStack.possible(turn(S, A), model)
    for t, d in ((H, A), (A, H), (A, R), (R, R)):
        assert not AutoStack.possible(turn(t, d), model), (t, d)
    assert not AutoStack.possible(turn(A, None), model)
    assert not AutoStack.possible(turn(A, A), head)  # the MTP head keeps no draft KV
