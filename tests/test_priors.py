"""The acceptance priors a fresh session starts from (costmodel/priors.py, bench priors):
the replay that fits them, the gate and the draft estimate that start from them, the
shipped file, and the bench's first-turn mode that measures them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from localspec.bench.common import Prompt
from localspec.bench.runner import Runner
from localspec.bench.speed import parse_grid
from localspec.costmodel import CostCurve, fresh_acceptance, priors
from localspec.costmodel.acceptance import PRIOR_ALPHA
from localspec.costmodel.lookup import PRIOR_TRIALS, LookupGate, gate_key
from localspec.decode.drafters.lookup import NgramIndex, Regions


@pytest.fixture(autouse=True)
def _priors_on():
    priors.use(True)
    yield
    priors.use(True)


def test_the_replay_counts_what_a_drafting_lookup_would_have_seen():
    """Prompt 1 2 3 4 5 9; the answer copies 1 2 3 4 5 then leaves the copy (7): at answer
    position 2 the tail (1 2) matches, its draft 3 4 5 9 .. is right for 3 tokens (accepted 3,
    reached 4), the walk jumps past them and the target's own token; no later tail matches."""
    prompt, gen = [1, 2, 3, 4, 5, 9], [1, 2, 3, 4, 5, 7, 8]
    got = priors.replay_lookups(prompt, gen, NgramIndex(2, 4), Regions(len(prompt)), l_max=16, key=gate_key)
    # position 1: history ... 9 1 -> tail (9 1) unseen, (1) too short; position 2: tail (1 2)
    # is the prompt's start: draft 3 4 5 9, answer 3 4 5 7 -> 3 accepted of 4 reached
    assert got == {"ngram:2:prompt": [3.0, 4.0]}  # the continuation was found in the prompt
    assert priors.right_prefix([3, 4, 5, 9], [3, 4, 5, 7]) == 3 and priors.right_prefix([], [1]) == 0


def test_a_match_inside_a_long_copy_is_counted_apart():
    """The answer copies a 20-token prompt: the walk's first match (2 tokens agree) is keyed
    by its length and origin; once the copy agrees far enough back (LONG_RUN; shifted here so a
    20-token copy reaches it), the matches are counted under the same key marked long, as
    costmodel/lookup.gate_key keys the live gate."""
    prompt = list(range(100, 120))
    got = priors.replay_lookups(prompt, prompt[:20], NgramIndex(2, 2), Regions(len(prompt)), l_max=4,
                                key=lambda s, m, o, run: gate_key(s, m, o, run + 4))  # LONG_RUN 12 as if 8
    assert set(got) == {"ngram:2:prompt", "ngram:2:prompt:long"}
    short, long = got["ngram:2:prompt"], got["ngram:2:prompt:long"]
    assert short[0] == short[1] and long[0] >= long[1] - 1  # a copy: right to its end (the last draft runs past it)
    assert long[1] > 0 and short[1] > 0


def test_a_draft_that_is_right_to_its_end_counts_no_rejection():
    """At position 2 the draft 7 8 (L = 2, read off the prompt) is right to its end: 2 accepted
    of 2 reached; at position 5 the draft 5 6 (read off the answer's first tokens: the latest
    8 9 is the prompt's, followed by the answer's 5) is wrong at once: 0 of 1."""
    got = priors.replay_lookups([5, 6, 7, 8, 9], [5, 6, 7, 8, 9, 1], NgramIndex(2, 2), Regions(5), l_max=2, key=gate_key)
    assert got == {"ngram:2:prompt": [2.0, 2.0], "ngram:2:answer": [0.0, 1.0]}


def test_the_gate_starts_from_a_prior_and_live_evidence_outweighs_it():
    steep = CostCurve([1, 2, 4, 8, 16], [0.028, 0.047, 0.072, 0.127, 0.148])
    bad, good = ("ngram", 2), ("ngram", 8)
    gate = LookupGate(prior={bad: (0.3, 6.0), good: (5.7, 6.0)})
    assert gate.alpha(bad) == pytest.approx(0.05) and gate.alpha(good) == pytest.approx(0.95)
    assert gate.best_length(steep, bad, 16) == (0, 1.0)  # a prior that says it fails: not tried
    assert gate.best_length(steep, good, 16)[0] >= 8  # one that says it holds: drafted long at once
    # an informed prior explores less than the uninformed one
    unknown = ("ngram", 5)
    assert gate.optimistic_alpha(good) - gate.alpha(good) < gate.optimistic_alpha(unknown) - gate.alpha(unknown)
    for _ in range(30):
        gate.update(good, 0, 8)  # this session's 8-token matches fail
    assert gate.alpha(good) < 0.3 and gate.best_length(steep, good, 16) == (0, 1.0)


def test_the_shipped_file_parses_and_covers_the_default_pair():
    data = priors.shipped()
    assert data, "localspec/data/priors.json is missing or unreadable"
    table = priors.lookup_priors()
    assert table and all(k[0] in ("ngram", "prediction") and 2 <= k[1] <= 64 for k in table)
    # a prediction is text the client gave: it starts from the prompt matches' priors
    assert {k[1] for k in table if k[0] == "prediction"} == {k[1] for k in table if k[0] == "ngram" and k[2:] == ("prompt",)}
    assert all(table[("prediction", k[1])] == table[k] for k in table if k[0] == "ngram" and k[2:] == ("prompt",))
    # a prompt match and an answer match are priced apart, and the answer's copies are worse bets
    p2, a2 = table[("ngram", 2, "prompt")], table[("ngram", 2, "answer")]
    assert p2[0] > a2[0] + 0.2 * priors.PRIOR_WEIGHT
    for pa, pt in table.values():
        assert pt == priors.PRIOR_WEIGHT and 0.0 <= pa <= pt
    thin = [k for k, (_, reached) in data["lookup"].items() if reached < priors.MIN_EVIDENCE]
    assert all(priors.key_text(k) not in thin for k in table)  # thin evidence stays uninformed
    a = priors.draft_alpha("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", True)
    assert a is not None and 0.3 < a < 1.0
    assert priors.draft_alpha("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                              False) is None  # fitted at T = 0 only
    assert data["fitted"]["lookup"]["half"] == "tune"  # never fitted on the report half


def test_a_shipped_prior_explores_by_the_positions_it_was_fitted_on():
    """A prior weighs PRIOR_WEIGHT trials against the session's evidence, but its exploration
    bonus shrinks with the positions behind it: a 2-token prompt match fitted at 0.89 on 873
    positions is bet on at about 0.89, not 0.98 (a 15-token bet that lost on chat)."""
    key = ("ngram", 2, "prompt")
    fitted = LookupGate(prior={key: (0.89 * 6, 6.0)}, evidence={key: 873.0})
    guessed = LookupGate(prior={key: (0.89 * 6, 6.0)}, evidence={})
    assert fitted.optimistic_alpha(key) - fitted.alpha(key) < 0.02
    assert guessed.optimistic_alpha(key) == pytest.approx(min(0.98, 0.89 + 0.4 / 5**0.5))
    assert LookupGate(prior={}, evidence={key: 873.0}).optimistic_alpha(key) == pytest.approx(0.5 + 0.4)  # no prior: unfitted
    table = priors.lookup_evidence()
    assert table and set(table) == set(priors.lookup_priors())


def test_keys_round_trip_and_malformed_entries_are_skipped():
    for key in [("ngram", 8), ("ngram", 8, "prompt"), ("suffix", 3), ("ngram", 8, "prompt", "long")]:
        assert priors.parse_key(priors.key_text(key)) == key
    for text in ["ngram", "ngram:x", ":3", "ngram:3:", "ngram:3::long", "a:1:b:c:d"]:
        assert priors.parse_key(text) is None


def test_turning_them_off_gives_the_uninformed_estimates():
    priors.use(False)
    assert LookupGate().prior == {} and LookupGate().alpha(("ngram", 8)) == pytest.approx(0.5)
    ctx = SimpleNamespace(model=SimpleNamespace(path=Path("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")))
    dctx = SimpleNamespace(model=SimpleNamespace(path=Path("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")))
    assert fresh_acceptance(ctx, dctx, True).alpha == pytest.approx(PRIOR_ALPHA)
    priors.use(True)
    assert fresh_acceptance(ctx, dctx, True).alpha == pytest.approx(
        priors.draft_alpha(ctx.model.path.name, dctx.model.path.name, True))
    assert fresh_acceptance(ctx, dctx, False).alpha == pytest.approx(PRIOR_ALPHA)
    assert LookupGate().prior.get(("ngram", 99), (0, PRIOR_TRIALS))[1] == PRIOR_TRIALS


def test_first_turn_mode_forgets_before_every_prompt_and_cold_turns_priors_off():
    from tests.test_bench_runner import Scripted, _args

    class Forgetful(Scripted):
        def __init__(self) -> None:
            super().__init__()
            self.learning: list[bool] = []

        def forget_learning(self, priors: bool = True) -> None:
            self.learning.append(priors)

    cols = {s.label: s for s in parse_grid(["auto", "auto-cold"], [])}
    assert set(cols) == {"ar", "auto", "auto cold"}
    sess = Forgetful()
    run = Runner(sess, _args(first_turn=True))
    for label in ("auto", "auto cold"):
        run.local(Prompt("chat", "c1", "hi"), cols[label], seed=0)
    assert sess.learning == [True, False]
    Runner(sess, _args()).local(Prompt("chat", "c1", "hi"), cols["auto"], seed=0)
    assert sess.learning == [True, False]  # without --first-turn the session keeps learning


def test_bench_priors_fits_on_a_real_model(smollm2_path, tmp_path, capsys):
    from localspec.cli.main import main

    out = tmp_path / "p.json"
    out.write_text(json.dumps({"draft": {"x--y": 0.5}}))
    answers = tmp_path / "answers.json"
    args = ["bench", "priors", "-m", str(smollm2_path), "--kinds", "edit", "-n", "12", "--answers", str(answers)]
    assert main([*args, "--out", str(out)]) == 0
    saved = json.loads(answers.read_text())
    assert len(saved["edit"]) == 20 and all(len(g) <= 12 for _, _, g in saved["edit"])
    data = json.loads(out.read_text())
    assert data["draft"] == {"x--y": 0.5}  # other pairs' entries are kept
    assert data["lookup"] and data["fitted"]["lookup"]["half"] == "tune"
    for acc, reached in data["lookup"].values():
        assert 0 <= acc <= reached
    assert "lookup acceptance per matched length" in capsys.readouterr().out
    # the saved answers are reused (no model needed for them) and the gate replayed on them
    assert main([*args, "--simulate", "--curve", "1:10,2:15,4:20,8:30,16:50"]) == 0
    text = capsys.readouterr().out
    assert "| gate | edit |" in text and "| shipped priors |" in text and "| uninformed" in text


@pytest.mark.slow
def test_bench_priors_fits_fim_requests_by_prefix_and_suffix(qwen_draft_path, tmp_path, capsys):
    """`--kinds fim`: the tuning half's holes asked as an editor asks them (at the cursor,
    then after typed words), the FIM ids saved with the answers, the keys split by the FIM
    prompt's regions (no `prompt` origin: a FIM prompt is prefix and suffix)."""
    from localspec.cli.main import main

    answers, out = tmp_path / "answers.json", tmp_path / "p.json"
    args = ["bench", "priors", "-m", str(qwen_draft_path), "--kinds", "fim", "--fim-holes", "2", "--answers", str(answers)]
    assert main([*args, "--out", str(out)]) == 0
    saved = json.loads(answers.read_text())
    suf, mid = saved["_fim_ids"]
    assert suf >= 0 and mid >= 0 and len(saved["fim"]) >= 2  # one hole, at the cursor and typed
    assert all(p.count(suf) == 1 and p[-1] == mid and len(g) <= 64 for _, p, g in saved["fim"])
    keys = [priors.parse_key(k) for k in json.loads(out.read_text())["lookup"]]
    assert keys and all(k[2] in ("prefix", "suffix", "answer") for k in keys)
    assert "(fim " in capsys.readouterr().out  # the per-kind column of the fit


def test_the_gate_replay_prices_auto_lookups_on_an_answer():
    """A copied answer: a gate that believes in 8-gram matches drafts and beats AR on a steep
    CPU curve; one that believes they fail never drafts (exactly AR's time)."""
    from localspec.bench.gate_replay import replay, speedups

    steep = CostCurve([1, 2, 4, 8, 16, 32], [0.031, 0.060, 0.106, 0.234, 0.330, 0.530])
    prompt = list(range(100, 160))
    gen = [100 + i for i in range(48)]  # the answer re-quotes the prompt
    keys = [("ngram", n, "prompt", *long) for n in range(2, 9) for long in ((), ("long",))]  # the prompt's matches
    believer = LookupGate(prior={k: (5.9, 6.0) for k in keys})
    sceptic = LookupGate(prior={k: (0.0, 60.0) for k in keys})
    seconds, passes, drafted = replay(prompt, gen, believer, steep, 2, 8)
    assert drafted > 0 and passes < len(gen) and seconds < len(gen) * steep(1) / 1.25
    seconds, passes, drafted = replay(prompt, gen, sceptic, steep, 2, 8)
    assert drafted == 0 and passes == len(gen) and seconds == pytest.approx(len(gen) * steep(1))
    answers = [("a", prompt, gen), ("b", prompt, gen)]
    assert speedups(answers, lambda: LookupGate(prior={k: (0.0, 60.0) for k in keys}), steep, 2, 8) == pytest.approx([1.0, 1.0])


def test_without_exploration_the_gate_bets_on_its_estimate():
    """A draft-model phase prices a lookup on the estimate (auto.MODEL_PHASE_EXPLORE): an
    unknown match length is not tried there, while an AR phase still explores it."""
    from localspec.decode.policy import auto

    steep = CostCurve([1, 2, 4, 8, 16], [0.028, 0.047, 0.072, 0.127, 0.148])
    gate = LookupGate(prior={})
    assert gate.best_length(steep, ("ngram", 5), 16)[0] > 0  # optimism: 0.5 + 0.4
    assert gate.best_length(steep, ("ngram", 5), 16, explore=False) == (0, 1.0)
    assert auto.MODEL_PHASE_EXPLORE is False


def test_a_session_forgets_into_the_priors_or_into_none():
    """SessionCosts.forget_learning: the gate's evidence and the draft's acceptance go; the
    next turn starts from the shipped priors, or (priors=False) from the uninformed ones,
    without touching the process-wide switch."""
    from localspec.costmodel import CostModel
    from localspec.costmodel.acceptance import Acceptance
    from localspec.costmodel.session import SessionCosts

    def ctx(name):
        return SimpleNamespace(model=SimpleNamespace(path=Path(name)))

    sc = SessionCosts.__new__(SessionCosts)
    sc.target, sc.draft = ctx("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"), ctx("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    sc._partial = None
    sc.costs = cm = CostModel(CostCurve([1], [0.03]), CostCurve([1], [0.01]))
    cm.acceptance_path = Path("accept-x--y-t0.json")
    cm.lookup = LookupGate()
    cm.lookup.update(("ngram", 8), 0, 16)
    cm.acceptance.update(0, 8)
    sc.forget_learning(priors=False)
    assert cm.lookup.prior == {} and not cm.lookup.trials and cm.acceptance.alpha == pytest.approx(PRIOR_ALPHA)
    assert priors.enabled()
    sc.forget_learning()
    assert cm.lookup.prior == priors.lookup_priors() and cm.acceptance.trials == 0
    assert cm.acceptance.alpha == pytest.approx(priors.draft_alpha(sc.target.model.path.name,
                                                                   sc.draft.model.path.name, True))
    assert Acceptance.is_greedy(cm.acceptance_path) and not Acceptance.is_greedy(Path("accept-x--y-tx.json"))


def test_auto_cold_needs_first_turn(capsys):
    """auto-cold only means something on a first turn: without --first-turn the bench says so
    in one line (exit 2) before any model loads."""
    from localspec.cli.main import main

    rc = main(["bench", "speed", "--kinds", "chat", "--half", "tune", "--methods", "auto-cold", "--no-peer", "--limit", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "add --first-turn" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ the draft's calibration (stop 51)
def test_the_draft_length_rule_starts_from_the_shipped_calibration():
    """A bin with no evidence of this session reads the shipped calibration (where the pair
    has one), else the bin's confidence; the session's own evidence then moves it."""
    from localspec.costmodel.acceptance import BIN_PRIOR, N_BINS, Acceptance

    plain = Acceptance()
    assert plain.accept_prob(0.55) == pytest.approx(0.55)  # bin 5's midpoint
    fitted = Acceptance(bin_prior=[0.3 + 0.07 * b for b in range(N_BINS)])
    assert fitted.accept_prob(0.55) == pytest.approx(0.3 + 0.35)
    fitted.update(0, 1, [0.55])  # one rejection at that confidence
    assert fitted.accept_prob(0.55) == pytest.approx(BIN_PRIOR * 0.65 / (BIN_PRIOR + 1))


def test_shipped_calibration_bins_are_read_with_thin_bins_left_at_their_confidence(monkeypatch):
    rows = [[0, 0]] * 5 + [[18, 19], [80, 100], [90, 100], [95, 100], [99, 100]]
    monkeypatch.setattr(priors, "shipped", lambda: {"draft_bins": {"t--d": rows, "bad--d": [["x", 1]]}})
    got = priors.draft_bins("t", "d", True)
    assert got is not None and len(got) == 10
    assert got[5] is None  # 19 positions < BIN_MIN: the bin keeps its confidence
    from localspec.costmodel.acceptance import Acceptance

    assert Acceptance(bin_prior=got).accept_prob(0.55) == pytest.approx(0.55)
    assert got[6] == pytest.approx(0.8) and got[9] == pytest.approx(0.99)
    assert priors.draft_bins("t", "d", False) is None  # fitted at T = 0 only
    assert priors.draft_bins("bad", "d", True) is None and priors.draft_bins("x", "y", True) is None


def test_the_shipped_file_calibrates_the_f16_pair():
    bins = priors.draft_bins("qwen2.5-coder-1.5b-instruct-f16-from-q4_k_m.gguf",
                             "qwen2.5-coder-0.5b-instruct-q4_0-from-q4_k_m.gguf", True)
    assert bins is not None and len(bins) == 10 and all(b is not None and 0.0 <= b <= 1.0 for b in bins)
    assert bins[-1] > 0.9  # a confident greedy draft is the target's almost always
    ctx = SimpleNamespace(model=SimpleNamespace(path=Path("qwen2.5-coder-1.5b-instruct-f16-from-q4_k_m.gguf")))
    dctx = SimpleNamespace(model=SimpleNamespace(path=Path("qwen2.5-coder-0.5b-instruct-q4_0-from-q4_k_m.gguf")))
    assert fresh_acceptance(ctx, dctx, True).bin_prior == bins
    assert fresh_acceptance(ctx, dctx, False).bin_prior is None


def test_calibration_bins_count_agreement_by_confidence():
    from localspec.bench.priors import calibration_bins

    bins = calibration_bins([[(True, 0.95), (False, 0.95), (True, 0.12)], [(False, 0.0), (True, 1.0)]])
    assert bins[9] == [2.0, 3.0] and bins[1] == [1.0, 1.0] and bins[0] == [0.0, 1.0]
    assert sum(t for _, t in bins) == 5


def test_the_draft_calibration_reads_agreement_and_confidence(smollm2_path, smollm2_q4_0_path):
    from localspec import tools
    from localspec.backend.model import Model

    m = Model(smollm2_path)
    try:
        prompt = m.tokenize("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n", add_special=True)
        answer = m.tokenize("    return a - b\n", parse_special=False)
    finally:
        m.close()
    cal = tools.draft_calibration(smollm2_q4_0_path, [(prompt, answer)], 2)
    agree = tools.draft_agreement(smollm2_q4_0_path, [(prompt, answer)], 2)
    assert [ok for ok, _ in cal[0]] == agree[0] and len(agree[0]) == len(answer)
    assert all(0.0 < c <= 1.0 for _, c in cal[0]) and any(ok for ok, _ in cal[0])
