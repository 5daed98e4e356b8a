"""`bench ceiling`'s replay: the perfect-gate bound on what prompt lookups can give."""

from __future__ import annotations

import pytest

from localspec.bench.ceiling import curve_from_points, replay

# a flat batch curve: verifying any number of tokens costs one step
FLAT = curve_from_points({1: 1.0, 64: 1.0})
# a linear one: n tokens cost n steps, so no draft can pay
LINEAR = curve_from_points({1: 1.0, 64: 64.0})


def test_a_copied_answer_on_a_flat_curve_is_bounded_by_its_copies() -> None:
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    gen = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # the prompt, copied
    speed, per_decode = replay(prompt, gen, FLAT, l_max=64)
    # token 1 comes from the prompt's decode; the tail (1) has no 2-token match, so token 2 is
    # written alone; from then on the tail (1, 2) matches and the rest (8 tokens) is one draft
    assert per_decode == pytest.approx(10 / 3)
    assert speed == pytest.approx(10 / 3)


def test_a_max_length_cuts_the_draft() -> None:
    prompt = list(range(1, 21))
    gen = list(range(1, 21))
    _, long = replay(prompt, gen, FLAT, l_max=64)
    _, short = replay(prompt, gen, FLAT, l_max=4)
    assert long > short
    assert short <= 5.0  # at most 4 drafted + 1 written per decode


def test_a_linear_curve_leaves_no_gain_and_new_text_none() -> None:
    prompt = list(range(1, 21))
    speed, _ = replay(prompt, list(range(1, 21)), LINEAR, l_max=16)
    assert speed == pytest.approx(1.0)  # every drafted token costs what writing it would
    speed, per_decode = replay(prompt, [100 + i for i in range(20)], FLAT, l_max=16)
    assert speed == pytest.approx(1.0) and per_decode == pytest.approx(1.0)


def test_any_occurrence_finds_the_right_copy_the_latest_one_misses() -> None:
    # (7, 8) occurs twice: first followed by 1 2 3 4, later by 9 9; the answer continues 1 2 3 4
    prompt = [7, 8, 1, 2, 3, 4, 0, 7, 8, 9, 9, 0]
    gen = [5, 7, 8, 1, 2, 3, 4]
    latest, _ = replay(prompt, gen, FLAT, l_max=8, mode="latest")
    any_, _ = replay(prompt, gen, FLAT, l_max=8, mode="any")
    assert any_ > latest


def test_a_curve_is_read_as_milliseconds_and_bad_ones_are_refused() -> None:
    from localspec.bench.ceiling import parse_curve
    from localspec.errors import ConfigError

    assert parse_curve("1:28,16:148") == {1: pytest.approx(0.028), 16: pytest.approx(0.148)}
    for bad in ("16:148", "1:28,x:3", "1:0", "1-28"):
        with pytest.raises(ConfigError):
            parse_curve(bad)


def test_bench_ceiling_replays_real_greedy_answers(smollm2_q8_path, tmp_path, capsys) -> None:
    """End to end on SmolLM2 with a given curve (no llama-bench): a row per lookup mode and
    length, each bound at least AR on a curve where batches are cheaper than their tokens;
    a bad --curve is a one-line refusal (exit 2) before any model loads."""
    import json

    from localspec.cli.main import main

    out = tmp_path / "ceiling.json"
    args = ["bench", "ceiling", "-m", str(smollm2_q8_path), "--kinds", "edit", "-n", "24",
            "--curve", "1:10,8:20,64:100", "--lengths", "8", "32", "--out", str(out)]
    assert main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["mode"], r["l_max"]) for r in rows] == [("latest", 8), ("latest", 32), ("any", 8), ("any", 32)]
    for r in rows:
        assert len(r["per_prompt"]) == 6 and all(s >= 1.0 - 1e-9 for s in r["per_prompt"].values())
    assert "batch curve (--curve, ms): 1: 10, 8: 20, 64: 100" in capsys.readouterr().out
    assert main(["bench", "ceiling", "-m", str(smollm2_q8_path), "--curve", "8:20"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--curve needs a 1-token point" in err[0]


def test_latest_matches_the_longest_tail_first_as_the_session_does() -> None:
    """`latest` replays the session's lookup (--spec-ngram-max 8 by default): the 6-token
    tail (1 2 3 4 5) finds the copy the answer follows; a 4-token cap matches (2 3 4 5) at its
    later, wrong occurrence."""
    prompt = [1, 2, 3, 4, 5, 6, 10, 11, 0, 2, 3, 4, 5, 20, 21, 0, 1, 2, 3, 4, 0]
    gen = [1, 2, 3, 4, 5, 6, 10, 11]
    longest, _ = replay(prompt, gen, FLAT, l_max=8)
    capped, _ = replay(prompt, gen, FLAT, l_max=8, n_max=4)
    assert longest > capped


# ------------------------------------------------------------------ with the draft model (-md)
def test_agreement_runs_count_right_tokens_in_a_row() -> None:
    from localspec.bench.ceiling import agreement_runs

    assert agreement_runs([True, True, False, True, False, False]) == [2, 1, 0, 1, 0, 0]
    assert agreement_runs([]) == []


def test_the_oracle_schedule_is_never_below_the_lookup_replay() -> None:
    """With no draft model agreement the dynamic program can still take every lookup the
    replay takes, so it is at least as fast (equal on a flat curve, where longest is best)."""
    from localspec.bench.ceiling import lookup_rights, mixed_replay

    prompt = [7, 8, 1, 2, 3, 4, 0, 7, 8, 9, 9, 0] + list(range(20, 40))
    gen = [5, 7, 8, 1, 2, 3, 4, 50, 51] + list(range(20, 36))
    for curve in (FLAT, LINEAR, curve_from_points({1: 1.0, 4: 1.3, 8: 3.0, 16: 4.0})):
        rights = lookup_rights(prompt, gen, 16)
        dp, _, share = mixed_replay(rights, [0] * len(gen), curve, 0.5, 16)
        greedy, _ = replay(prompt, gen, curve, 16)
        assert dp >= greedy - 1e-9 and share == 0.0
        if curve is FLAT:
            assert dp == pytest.approx(greedy)


def test_a_free_right_draft_model_fills_what_lookups_miss() -> None:
    from localspec.bench.ceiling import agreement_runs, mixed_replay

    n = 20
    rights = [0] * n  # new text: no lookup is right anywhere
    runs = agreement_runs([True] * n)
    # a free draft on a flat curve: every decode verifies 4 right tokens and writes 1 (token 0
    # comes from the prompt's decode): 1 + ceil(19 / 5) = 5 decodes
    speed, per_decode, share = mixed_replay(rights, runs, FLAT, 0.0, 4)
    assert per_decode == pytest.approx(4.0) and speed == pytest.approx(4.0)
    assert share == pytest.approx(15 / 20)
    # on a linear curve with a draft step as dear as a target step, nothing pays
    speed, _, share = mixed_replay(rights, runs, LINEAR, 1.0, 4)
    assert speed == pytest.approx(1.0) and share == 0.0


def test_the_draft_goes_where_the_lookup_is_wrong() -> None:
    """Lookups right on the first half, the draft model on the second: the oracle uses each
    where it is right and beats either alone."""
    from localspec.bench.ceiling import agreement_runs, mixed_replay

    n = 24
    rights = [max(0, 11 - i) for i in range(12)] + [0] * 12
    runs = agreement_runs([False] * 12 + [True] * 12)
    cost = curve_from_points({1: 1.0, 16: 2.0})
    both, _, share = mixed_replay(rights, runs, cost, 0.1, 16)
    lookups, _, _ = mixed_replay(rights, [0] * n, cost, 0.1, 16)
    model, _, _ = mixed_replay([0] * n, runs, cost, 0.1, 16)
    assert both > max(lookups, model) and 0.0 < share < 1.0


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
@pytest.mark.parametrize("kind", ["smollm2", "qwen35", "mamba2"])
def test_a_model_agrees_with_its_own_greedy_answer(smollm2_q8_path, tiny, kind) -> None:
    """decode/agreement.py's one teacher-forced decode: a model as its own draft agrees with
    its own greedy answer (near-ties under batch numerics aside), not with shuffled text, and
    reads the same rows when the text is decoded in 8-token chunks: on attention (SmolLM2), a
    hybrid (qwen35) and a recurrent (mamba2) memory alike."""
    import random

    from localspec import tools
    from localspec.config import GenConfig
    from localspec.events import Accepted, Written
    from localspec.loading import open_session
    from localspec.session import SessionOptions

    path = smollm2_q8_path if kind == "smollm2" else tiny[kind]
    sess = open_session(str(path), None, SessionOptions(threads=2))
    try:
        prompt_text = "def fibonacci(n):"
        prompt = sess.tokenize(prompt_text)
        gen: list[int] = []
        for ev in sess.generate(prompt_text, GenConfig(method="ar", n_predict=40)):
            if isinstance(ev, Written | Accepted):
                gen.extend(ev.tokens)
    finally:
        sess.close()
    shuffled = gen[:]
    random.Random(0).shuffle(shuffled)
    own, other = tools.draft_agreement(path, [(prompt, gen), (prompt, shuffled)], 2)
    assert len(own) == len(gen) == len(other)
    assert sum(own) >= 0.9 * len(gen)
    assert sum(other) < sum(own)
    (chunked,) = tools.draft_agreement(path, [(prompt, gen)], 2, n_batch=8)
    assert sum(chunked) >= 0.9 * len(gen)
    assert sum(a != b for a, b in zip(chunked, own, strict=True)) <= 0.1 * len(gen)


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_bench_ceiling_with_a_draft_model_end_to_end(smollm2_q8_path, smollm2_q4_0_path, tmp_path, capsys) -> None:
    """`-md` with a given draft step (no llama-bench): rows for the model alone and beside
    each lookup mode; the oracle over both is never below the lookup's own replay."""
    import json

    from localspec.cli.main import main

    out = tmp_path / "ceiling.json"
    args = ["bench", "ceiling", "-m", str(smollm2_q8_path), "-md", str(smollm2_q4_0_path), "--draft-ms", "3",
            "--kinds", "edit", "-n", "24", "--curve", "1:10,8:20,64:100", "--lengths", "8", "--out", str(out)]
    assert main(args) == 0
    data = json.loads(out.read_text())
    rows = {r["mode"]: r for r in data["rows"]}
    assert set(rows) == {"latest", "any", "draft", "latest+draft", "any+draft", "draft-blind"}
    assert data["draft_step_s"] == pytest.approx(0.003)
    for mode in ("latest", "any"):
        for pid, s in rows[mode]["per_prompt"].items():
            assert rows[f"{mode}+draft"]["per_prompt"][pid] >= s - 1e-9
    assert all(0.0 <= rows[m]["model_share"] <= 1.0 for m in ("draft", "latest+draft"))
    for pid, s in rows["draft-blind"]["per_prompt"].items():  # no rule beats the oracle
        assert s <= rows["draft"]["per_prompt"][pid] + 1e-9
    assert 0.0 < rows["draft-blind"]["share_of_oracle"] <= 1.0 + 1e-9
    out_text = capsys.readouterr().out
    assert "% by the model" in out_text and "without foresight reaches" in out_text


# ------------------------------------------------------------------ constrained answers, the engine's curve
def test_forced_runs_join_the_lookups_as_the_engine_drafts_them() -> None:
    """Where the grammar forces tokens they are the draft (the grammar drafter goes first);
    elsewhere a lookup's right part gets the tokens forced after it appended (constrained.fit)."""
    from localspec.bench.ceiling import _forced_share, with_forced

    lookups = [0, 2, 0, 0, 0, 0]
    forced = [1, 0, 0, 3, 2, 1]
    assert with_forced(lookups, None) == lookups
    # 0: forced 1; 1: lookup 2 then position 3's 3 forced; 2: nothing; 3..5: forced
    assert with_forced(lookups, forced) == [1, 5, 0, 3, 2, 1]
    assert _forced_share(forced) == pytest.approx(4 / 6)  # runs from 0 (1 token) and 3 (3 tokens)


def test_forced_runs_of_a_real_constrained_answer(smollm2_q8_path) -> None:
    """SmolLM2 under a schema whose only value is fixed: the key and the value are forced
    runs several tokens long, each the answer's own next tokens."""
    import json

    from localspec import tools
    from localspec.config import GenConfig
    from localspec.constrain import ConstraintSpec
    from localspec.events import Written
    from localspec.loading import open_session
    from localspec.session import SessionOptions

    schema = {"type": "object", "properties": {"answer": {"enum": ["certainly yes"]}},
              "required": ["answer"], "additionalProperties": False}
    spec = ConstraintSpec("json_schema", json.dumps(schema))
    sess = open_session(str(smollm2_q8_path), None, SessionOptions(threads=2))
    try:
        cfg = GenConfig(method="ar", n_predict=40, constraint=spec)
        gen = [t for ev in sess.generate("Say yes as JSON.", cfg) if isinstance(ev, Written) for t in ev.tokens]
        runs = tools.forced_runs(sess, spec, gen)
    finally:
        sess.close()
    assert len(runs) == len(gen) and max(runs) >= 3
    for i, k in enumerate(runs):
        assert i + k <= len(gen)
        if k > 1:  # a forced run goes on forcing its own rest
            assert runs[i + 1] >= k - 1


def test_the_engine_curve_times_decodes_with_every_rows_logits(smollm2_q8_path) -> None:
    from localspec import tools

    points = tools.verify_curve(smollm2_q8_path, 2, (1, 8), reps=2)
    assert sorted(points) == [1, 8] and 0 < points[1] <= points[8]


# ------------------------------------------------------------------ the rule without foresight


def test_calibration_is_acceptance_per_confidence_bin() -> None:
    from localspec.bench.foresight import fit_calibration

    table = fit_calibration([(True, 0.92), (False, 0.93), (True, 0.95), (True, 0.05)], bins=10)
    assert table[9] == pytest.approx(2 / 3) and table[0] == pytest.approx(1.0)
    assert table[4] == pytest.approx(0.45)  # no evidence: the confidence at face value


def _oracle(agree: list[bool], cost, step: float, l_max: int) -> float:
    from localspec.bench.ceiling import agreement_runs, mixed_replay

    return mixed_replay([0] * len(agree), agreement_runs(agree), cost, step, l_max)[0]


def test_a_rule_that_knows_acceptance_from_confidence_matches_the_oracle() -> None:
    """Where confidence says exactly which tokens are right, stopping on it is foresight."""
    import random

    from localspec.bench.foresight import best_blind

    rng = random.Random(3)
    cost = curve_from_points({1: 1.0, 8: 1.6, 16: 2.2, 32: 4.0})
    answers = []
    for _ in range(4):
        agree = [rng.random() < 0.8 for _ in range(120)]
        answers.append([(a, 0.99 if a else 0.01) for a in agree])
    _, per = best_blind(answers, cost, 0.1, 16)
    for ans, (speed, _) in zip(answers, per, strict=True):
        assert speed == pytest.approx(_oracle([a for a, _ in ans], cost, 0.1, 16), rel=0.03)


def test_without_a_signal_the_rule_falls_short_of_the_oracle_and_never_passes_it() -> None:
    import random

    from localspec.bench.foresight import best_blind, blind_replay, fit_calibration

    rng = random.Random(5)
    cost = curve_from_points({1: 1.0, 8: 1.6, 16: 2.2, 32: 4.0})
    answers = [[(rng.random() < 0.8, 0.8) for _ in range(150)] for _ in range(4)]  # one confidence for all
    _, per = best_blind(answers, cost, 0.1, 16)
    shares = [s / _oracle([a for a, _ in ans], cost, 0.1, 16) for ans, (s, _) in zip(answers, per, strict=True)]
    assert max(shares) < 0.95
    table = fit_calibration([p for ans in answers for p in ans])
    for rate in (0.5, 1.0, 2.0, 4.0):  # at any rate, on any answer: at most the oracle
        for ans in answers:
            s, _ = blind_replay([a for a, _ in ans], [c for _, c in ans], cost, 0.1, 16, rate, table)
            assert s <= _oracle([a for a, _ in ans], cost, 0.1, 16) + 1e-9
