"""`auto` as a policy, decided without a model: recorded outcomes in, plans out.

decode/policy/auto.AutoPolicy reads only the turn's history, the cost model's curves and
estimates, and its drafters; here those are a namespace, hand-made curves, the real ngram
lookup and a fake model drafter. Each test feeds the policy verification results as the
loop would (`learn`) and checks the plan it asks for next (`next`): the AR phase and its
probes, the AR cost checks of a speculative phase, the lookup-vs-draft-model choice, the
gate learning from lookup iterations, and stacking where the learned gain buys its rows.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from localspec.backend.memory import Memory
from localspec.config import GenConfig, SamplingConfig
from localspec.costmodel import CostCurve, CostModel
from localspec.costmodel.lookup import LOOKUP_LONG_L, LOOKUP_MAX_L
from localspec.decode.drafters.base import MODEL, DrafterBase, Outcome
from localspec.decode.drafters.lookup import NgramDrafter, Regions
from localspec.decode.policy.auto import (
    FIRST_PROBE,
    PROBE_EVERY,
    RECHECK_EVERY,
    RETEST_L,
    AutoPolicy,
)
from localspec.decode.policy.stack import AutoStack
from localspec.decode.speculative import IterationResult
from localspec.decode.state import KVState
from localspec.events import Stats
from localspec.verify import Decision

FLAT = CostCurve([1, 8, 16, 64], [0.010, 0.011, 0.012, 0.020])  # verifying 16 costs 1.2x one: a GPU's


class FakeModel(DrafterBase):
    """The draft model as the policy sees it: a name, a KV (for stacks), what it learned."""

    name, kind = "draft", MODEL

    def __init__(self) -> None:
        self.draft = NS(memory=Memory.ATTENTION)  # type: ignore[assignment]
        self.learned: list[Outcome] = []
        self.hint: list[int] = []

    def learn(self, outcome: Outcome) -> None:
        self.learned.append(outcome)


def make_turn(history: list[int], cm: CostModel, behind: int = 0, remaining: int = 256, **cfg) -> NS:
    cfg = GenConfig(method="auto", sampling=SamplingConfig(temp=0.0), auto_K=True, auto_L=True, **cfg)
    target, draft = (KVState(NS(memory=Memory.ATTENTION, n_seq_max=8, n_batch=512)) for _ in range(2))
    target.tokens = list(history)
    draft.tokens = list(history[:len(history) - behind])  # the draft's cache: caught up unless told
    return NS(cfg=cfg, stats=Stats(method="auto"), costs=cm, target=target, draft=draft,
              emitter=NS(remaining=remaining, done=None))


def result(tau: int, drafted: int, token: int = 0) -> IterationResult:
    return IterationResult([], Decision(0, tau, token), drafted, [0.9] * drafted, 0.001, 0.01, 0.0005)


def test_an_expensive_draft_decodes_plainly_and_never_probes():
    cm = CostModel(FLAT, CostCurve([1, 8], [0.012, 0.05]))  # a draft step dearer than a target step
    turn = make_turn([1, 2, 3, 4], cm)
    policy = AutoPolicy(turn, cm, FakeModel(), None, None)
    assert policy.settings is None and "speculation does not pay" in turn.stats.choice_note
    for _ in range(3 * FIRST_PROBE):
        plan = policy.next()
        assert plan.settings is None and plan.role == "ar"
        policy.learn(plan, None)


def test_an_ar_phase_probes_the_draft_when_it_could_pay():
    cm = CostModel(FLAT, CostCurve([1, 8], [0.002, 0.004]))
    for _ in range(50):  # a draft that was wrong every time so far: AR for now
        cm.acceptance.update(0, 4)
    turn = make_turn([1, 2, 3, 4], cm)
    model = FakeModel()
    policy = AutoPolicy(turn, cm, model, None, None)
    assert policy.settings is None
    roles = []
    for _ in range(PROBE_EVERY + 1):  # with this much evidence a probe waits PROBE_EVERY steps
        plan = policy.next()
        roles.append(plan.role)
        policy.learn(plan, result(4, 4) if plan.role == "model" else None)
    # AR until the probe is due, then one iteration of the model drafter, taught its outcome
    assert roles == ["ar"] * PROBE_EVERY + ["model"]
    assert model.learned == [Outcome(4, 4, [0.9] * 4)]


def test_a_contended_draft_is_re_tested_early_cheaply_and_ever_less_often():
    """A draft a busy minute priced out (issue 40) is still probed: after FIRST_PROBE plain
    steps, with RETEST_L drafted tokens, then after PROBE_EVERY, 2x, 4x ... while it stays
    busy (a turn of n tokens pays ~log2(n) draft steps); a quiet sample ends it."""
    draft = CostCurve([1, 8], [0.002, 0.004])
    cm = CostModel(FLAT, draft)
    for _ in range(8):
        draft.observe(1, 0.060)  # 30x: contention
    for _ in range(50):
        cm.acceptance.update(4, 4)
    turn = make_turn([1, 2, 3, 4], cm)
    policy = AutoPolicy(turn, cm, FakeModel(), None, None)
    assert policy.settings is None and "draft contended" in turn.stats.choice_note
    probes = []
    for i in range(FIRST_PROBE + PROBE_EVERY * 3 + 3):
        plan = policy.next()
        if plan.role == "model":
            probes.append((i, plan.settings.L))
            draft.observe(1, 0.060)  # still busy: the probe's draft step is slow
        policy.learn(plan, result(2, 2) if plan.role == "model" else None)
    assert probes == [(FIRST_PROBE, RETEST_L), (FIRST_PROBE + 1 + PROBE_EVERY, RETEST_L),
                      (FIRST_PROBE + 2 + 3 * PROBE_EVERY, RETEST_L)]
    assert policy.settings is None
    draft.observe(1, 0.0021)  # the machine is quiet again
    plan = policy.next()
    while plan.role != "model":
        policy.learn(plan, None)
        plan = policy.next()
    policy.learn(plan, result(2, 2))
    assert not cm.contended and policy.settings is not None  # speculating again


def test_a_speculative_phase_checks_the_ar_cost_live_a_few_times():
    cm = CostModel(FLAT, CostCurve([1, 8], [0.001, 0.002]))
    turn = make_turn([1, 2, 3, 4], cm)
    policy = AutoPolicy(turn, cm, FakeModel(), None, None)
    assert policy.settings is not None and policy.settings.method == "sd"
    roles = []
    for _ in range(3 * (RECHECK_EVERY + 1)):
        plan = policy.next()
        roles.append(plan.role)
        policy.learn(plan, result(3, 3) if plan.role == "model" else None)
    assert roles[:RECHECK_EVERY] == ["model"] * RECHECK_EVERY
    assert roles[RECHECK_EVERY] == "check" and cm.ar_checks >= 1  # the target's 1-token cost, seen live


def test_the_lookup_drafts_where_its_bet_beats_the_draft_models_setting():
    cm = CostModel(FLAT, CostCurve([1, 8], [0.004, 0.006]))
    edit = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 5, 7, 8, 9]  # the tail 7 8 9 occurred before
    turn = make_turn(edit, cm)
    model, lookup = FakeModel(), NgramDrafter(2, 4)
    policy = AutoPolicy(turn, cm, model, lookup, None)
    assert policy.settings is not None
    plan = policy.next()
    # no evidence yet: the gate's optimism prices a 3-gram match above the draft's setting
    assert plan.role == "lookup" and plan.drafter is lookup and plan.settings.K == 1
    key = plan.bet.key
    policy.learn(plan, result(plan.settings.L, plan.settings.L))
    assert cm.lookup.trials[key] > 0 and cm.lookup.accepted[key] == plan.settings.L
    # a lookup that keeps failing at this key loses the next iterations to the draft model
    for _ in range(300):
        cm.lookup.update(key, 0, 8)
    assert policy.next().role == "model"


def test_a_prompt_match_and_an_answer_match_are_different_bets():
    """The gate keys by where the continuation was found: the answer repeating itself (an
    answer-match key that failed every time) is not drafted, while the prompt's copy is."""
    steep = CostCurve([1, 2, 4, 8, 16], [0.028, 0.047, 0.072, 0.127, 0.148])
    cm = CostModel(steep, CostCurve([1], [0.0]))
    prompt = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
    turn = make_turn(prompt + [1, 2, 3, 1, 2], cm)
    policy = AutoPolicy(turn, cm, None, NgramDrafter(2, 4, Regions(len(prompt))), None)
    for _ in range(50):
        cm.lookup.update(("ngram", 2, "answer"), 0, 8)
        cm.lookup.update(("ngram", 2, "prompt"), 8, 8)
    assert policy.next().role == "ar"  # 1 2 -> 3: the answer's own words
    turn.target.tokens = prompt + [1, 2, 3, 41, 42]  # 41 42 -> 43: the prompt's
    plan = policy.next()
    assert plan.role == "lookup" and plan.bet.key == ("ngram", 2, "prompt") and plan.settings.L >= 8


def test_a_match_inside_a_long_copy_bets_past_sixteen_tokens():
    """A match whose source agrees LONG_RUN tokens back (a quoted file being re-written) may
    bet up to LOOKUP_LONG_L tokens, where the CPU curve makes 32 rows cost far less than 32
    steps; the same key in a short match is held to LOOKUP_MAX_L."""
    cpu = CostCurve([1, 8, 16, 32], [0.032, 0.233, 0.282, 0.466])  # Q4_K_M 1.5B, 2 threads
    cm = CostModel(cpu, CostCurve([1], [0.0]))
    quoted = list(range(100, 160))  # a 60-token file in the prompt
    key, long = ("ngram", 8, "prompt"), ("ngram", 8, "prompt", "long")
    # the answer re-writes the file's first 20 tokens: an 8-gram match 20 tokens into a copy
    turn = make_turn(quoted + quoted[:20], cm)
    policy = AutoPolicy(turn, cm, None, NgramDrafter(2, 8, Regions(len(quoted))), None)
    for _ in range(50):
        cm.lookup.update(key, 31, 31)
        cm.lookup.update(long, 31, 31)
    plan = policy.next()
    assert plan.role == "lookup" and plan.bet.key == long and LOOKUP_MAX_L < plan.settings.L <= LOOKUP_LONG_L
    # the same 8 tokens, but the answer came to them by another road: 9 tokens agree, not 12
    turn.target.tokens = quoted + [1, 2, 3] + quoted[11:20]
    plan = policy.next()
    assert plan.role == "lookup" and plan.bet.key == key and 8 < plan.settings.L <= LOOKUP_MAX_L


def test_a_match_inside_a_long_copy_is_another_bet_than_a_fresh_one():
    """The gate keys a match by whether its copy agrees LONG_RUN tokens back: a fresh 8-token
    match that failed every time does not stop the long copy's match from betting long, and
    the long key's failures do not stop a fresh match (costmodel/lookup.gate_key)."""
    cpu = CostCurve([1, 8, 16, 32], [0.032, 0.233, 0.282, 0.466])
    cm = CostModel(cpu, CostCurve([1], [0.0]))
    quoted = list(range(100, 160))
    key, long = ("ngram", 8, "prompt"), ("ngram", 8, "prompt", "long")
    turn = make_turn(quoted + quoted[:20], cm)
    policy = AutoPolicy(turn, cm, None, NgramDrafter(2, 8, Regions(len(quoted))), None)
    for _ in range(50):
        cm.lookup.update(key, 0, 15)  # fresh 8-token matches: wrong at once
        cm.lookup.update(long, 31, 31)  # inside copies: right to the end
    plan = policy.next()
    assert plan.role == "lookup" and plan.bet.key == long and plan.settings.L > LOOKUP_MAX_L
    turn.target.tokens = quoted + [1, 2, 3] + quoted[11:20]  # 9 tokens agree: a fresh match
    assert policy.next().role == "ar"


def test_no_draft_model_means_lookups_or_plain_steps():
    cm = CostModel(FLAT, CostCurve([1], [0.0]))
    turn = make_turn([1, 2, 3, 1, 2], cm)
    policy = AutoPolicy(turn, cm, None, NgramDrafter(2, 4), None)
    plan = policy.next()
    assert plan.role == "lookup" and plan.settings.L >= 1
    turn.target.tokens = [1, 2, 3, 4]  # nothing repeats
    assert policy.next().role == "ar"


@pytest.mark.parametrize("gain,stacks", [(3.0, True), (0.0, False)])
def test_it_stacks_where_the_learned_gain_buys_the_rows(gain, stacks):
    cm = CostModel(FLAT, CostCurve([1, 8], [0.001, 0.002]))
    edit = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 5, 7, 8, 9]
    turn = make_turn(edit, cm)
    model, lookup = FakeModel(), NgramDrafter(2, 4)
    policy = AutoPolicy(turn, cm, model, lookup, None)
    policy.stacks = AutoStack(turn, lookup, model, cm.lookup)  # type: ignore[arg-type]
    key = ("ngram", 3)
    for _ in range(300):  # the lookup alone is a poor bet at this key: the draft model drafts
        cm.lookup.update(key, 0, 8)
    if gain:
        for _ in range(10):
            cm.lookup.teach_gain(key, gain)
    plan = policy.next()
    assert plan.role == ("stack" if stacks else "model")
    if stacks:
        assert plan.drafter is policy.stacks.stack and plan.drafter.extra_drafts == 1


def test_a_draft_far_behind_on_a_short_answer_is_not_worth_its_catch_up():
    """An editor's completion: 2,000 prompt tokens the draft has not seen, 16 tokens to
    write. Evaluating them on the draft costs more than speculating saves: plain decoding
    (lookups still draft), said in the note; with a long answer ahead the draft runs."""
    cm = CostModel(FLAT, CostCurve([1, 8, 64], [0.002, 0.004, 0.02]))  # 2,000 behind: ~0.6 s
    history = list(range(2000))
    short = make_turn(history, cm, behind=2000, remaining=16)
    policy = AutoPolicy(short, cm, FakeModel(), None, None)
    assert policy.settings is None and "prompt tokens to evaluate first" in short.stats.choice_note
    assert policy.next().role == "ar"
    long = make_turn(history, cm, behind=2000, remaining=100_000)
    assert AutoPolicy(long, cm, FakeModel(), None, None).settings is not None
    caught_up = make_turn(history, cm, behind=0, remaining=16)
    assert AutoPolicy(caught_up, cm, FakeModel(), None, None).settings is not None


def test_the_forecast_prices_each_iteration_before_its_outcome_teaches_the_estimates():
    """Each iteration adds what the estimates expected of it, before `learn` moves them: a
    model draft by its calibrated confidences, a lookup by its gate key, a plain step as one
    token; the seconds are the curves' for the shapes that ran (costmodel/forecast.py)."""
    cm = CostModel(FLAT, CostCurve([1, 8], [0.004, 0.006]))
    edit = [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 5, 7, 8, 9]
    turn = make_turn(edit, cm)
    policy = AutoPolicy(turn, cm, FakeModel(), NgramDrafter(2, 4), None)
    plan = policy.next()
    assert plan.role == "lookup"
    key, L = plan.bet.key, plan.settings.L
    a, over = cm.lookup.alpha(key), cm.lookup.overhead  # the estimates before this iteration's outcome
    res = IterationResult([], Decision(0, 0, 0), L, [], 0.0, 0.01, 0.0005, 1 + L, 0)  # all rejected
    policy.learn(plan, res)
    expect = 1.0 + sum(a**i for i in range(1, L + 1))
    assert turn.stats.forecast == pytest.approx([expect, FLAT(1 + L) + over])
    assert cm.lookup.alpha(key) < a  # it learned from the outcome after pricing it
    # a draft-model iteration: 3 tokens drafted at confidences whose bins say 0.5 and 0.9
    turn.stats.forecast = []
    for c, p in ((0.55, 0.5), (0.95, 0.9)):
        b = int(c * 10)
        cm.acceptance.bin_accepted[b], cm.acceptance.bin_trials[b] = p * 1000, 1000.0
    plan = NS(role="model", settings=policy.settings or NS(K=1), bet=None)
    before = cm.overhead
    policy._forecast(plan, IterationResult([], Decision(0, 3, 0), 3, [0.95, 0.55, 0.95], 0.0, 0.0, 0.0, 4, 3))
    p1, p2, p3 = (cm.acceptance.accept_prob(c) for c in (0.95, 0.55, 0.95))
    assert turn.stats.forecast == pytest.approx([1 + p1 + p1 * p2 + p1 * p2 * p3, 3 * 0.004 + FLAT(4) + before])
    # a plain step (no plan, or a lookup that found nothing): one token, one target step
    turn.stats.forecast = []
    policy._forecast(NS(role="ar", settings=None, bet=None), None)
    assert turn.stats.forecast == pytest.approx([1.0, FLAT(1)])


def test_the_forecast_prices_a_recurrent_targets_catch_up_as_the_prediction_does():
    """On a memory that rolls back only `target_rollback` tokens, a draft longer than that
    costs a catch-up decode of the kept tokens unless it is accepted whole: the forecast adds
    it with the same rule as CostModel.iteration_seconds (rollback_seconds); attention adds none."""
    from localspec.costmodel import forecast

    cm = CostModel(FLAT, CostCurve([1, 8], [0.004, 0.006]))
    probs = [0.5] * 8
    tokens = forecast.chain_tokens(probs)
    plain = forecast.iteration_seconds(cm, 9, 0, 1, 0.0, 8, probs, tokens)
    assert plain == pytest.approx(FLAT(9))
    cm.target_rollback = 4
    kept = round(tokens)
    assert forecast.iteration_seconds(cm, 9, 0, 1, 0.0, 8, probs, tokens) == pytest.approx(
        FLAT(9) + (1 - 0.5**8) * FLAT(kept))
    assert forecast.iteration_seconds(cm, 5, 0, 1, 0.0, 4, probs[:4], tokens) == pytest.approx(FLAT(5))  # within rollback
    # the prediction charges the same catch-up for the same draft
    cm.acceptance.accepted, cm.acceptance.trials, cm.acceptance.prior_weight = 50.0, 100.0, 0.0
    base = cm.draft(1) + 7 * cm.draft(1) + FLAT(9) + cm.overhead
    assert cm.iteration_seconds(1, 8) == pytest.approx(base + (1 - 0.5**8) * FLAT(round(cm.expected_tokens(1, 8))))


def test_forecast_sums():
    from localspec.costmodel import forecast

    assert forecast.chain_tokens([]) == 1.0
    assert forecast.chain_tokens([0.5, 0.5]) == pytest.approx(1.75)
    into: list[float] = []
    forecast.add(into, 3.0, 0.03)
    forecast.add(into, 1.0, 0.01)
    assert into == pytest.approx([4.0, 0.04])
