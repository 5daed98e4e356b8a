"""Cost model arithmetic on synthetic curves: predictions, the AR fallback, the calibrated
dynamic draft length and what is persisted between runs (no model needed)."""

from __future__ import annotations

import json

import pytest

from localspec.config import GenConfig
from localspec.costmodel import BIN_MEMORY, N_BINS, Acceptance, CalibratedStop, CostCurve, CostModel


def linear(first: float, per_token: float) -> CostCurve:
    sizes = [1, 2, 4, 8, 16, 32, 64]
    return CostCurve(sizes, [first + per_token * (n - 1) for n in sizes])


def test_curve_interpolates_and_extrapolates_proportionally() -> None:
    c = CostCurve([1, 4], [0.010, 0.040])
    assert c(2) == pytest.approx(0.020)
    assert c(8) == pytest.approx(0.080)  # past the last measured size: proportional


def test_cheap_draft_is_chosen_and_an_expensive_one_falls_back_to_ar() -> None:
    cfg = GenConfig(method="auto", auto_K=True, auto_L=True)
    cheap = CostModel(linear(0.070, 0.005), linear(0.010, 0.010), acceptance=Acceptance(prior=0.9))
    best, ar = cheap.choose(cfg)
    assert best is not None and best.tok_per_s > 1.5 * ar
    costly = CostModel(linear(0.070, 0.005), linear(0.070, 0.070), acceptance=Acceptance(prior=0.9))
    assert costly.choose(cfg)[0] is None


def test_a_flat_gpu_verify_curve_makes_auto_pick_more_and_longer_drafts() -> None:
    """On a GPU verifying 64 tokens costs about what 1 does: the same acceptance then pays
    for more drafts and longer ones than on a CPU, where every verified token costs. The
    choice comes from the curves alone (no CPU assumption): GPU-like and CPU-like curves,
    same alpha, same config."""
    from localspec.config import SamplingConfig

    gpu = (linear(0.020, 0.00005), linear(0.002, 0.00002))
    cpu = (linear(0.150, 0.010), linear(0.020, 0.008))
    for temp in (0.0, 0.8):
        cfg = GenConfig(method="auto", auto_K=True, auto_L=True, sampling=SamplingConfig(temp=temp))
        g = CostModel(*gpu, acceptance=Acceptance(prior=0.7)).choose(cfg)[0]
        c = CostModel(*cpu, acceptance=Acceptance(prior=0.7)).choose(cfg)[0]
        assert g is not None and c is not None
        assert g.L > c.L, (temp, g, c)
        if temp > 0:  # sampled drafts: K > 1 is allowed, and the flat curve takes it
            assert g.K > c.K >= 1 and g.method == "mdbv", (g, c)


def test_calibration_learns_acceptance_per_confidence_bin() -> None:
    a = Acceptance()
    prior_low = a.accept_prob(0.15)
    assert prior_low == pytest.approx(0.15)  # no evidence: the bin's own confidence
    for _ in range(50):  # drafted at 0.15 and accepted, then one at 0.95 rejected
        a.update(1, 4, [0.15, 0.95, 0.95, 0.95])
    assert a.accept_prob(0.15) > 0.9
    assert a.accept_prob(0.95) < 0.2
    assert a.bin_trials[9] == 50  # positions after the rejection are not evidence
    for _ in range(400):
        a.update(4, 4, [0.15] * 4)
    assert a.bin_trials[1] == pytest.approx(BIN_MEMORY)  # old evidence fades


def test_calibration_is_saved_and_old_files_still_load(tmp_path) -> None:
    a = Acceptance()
    a.update(2, 4, [0.55, 0.35, 0.05])
    path = tmp_path / "accept.json"
    a.save(path)
    b = Acceptance()
    b.load(path)
    assert b.bin_accepted == a.bin_accepted and b.bin_trials == a.bin_trials and b.trials == a.trials
    path.write_text(json.dumps({"accepted": 3.0, "trials": 4.0}))  # before calibration existed
    c = Acceptance()
    c.load(path)
    assert c.trials == 4.0 and c.bin_trials == [0.0] * N_BINS


def test_calibrated_stop_drafts_while_the_expected_gain_beats_the_marginal_cost() -> None:
    # draft step 10 ms, each verified token 5 ms more: one more draft token costs 15 ms
    cm = CostModel(linear(0.070, 0.005), linear(0.010, 0.010))
    stop = CalibratedStop(cm, K=1, seconds_per_token=0.040)
    assert stop.worth(2, 0.5)  # 0.5 x 40 ms = 20 ms > 15 ms
    assert not stop.worth(2, 0.3)  # 12 ms < 15 ms
    k2 = CalibratedStop(cm, K=2, seconds_per_token=0.040)  # two drafts: 20 ms + 2 x 5 ms
    assert k2.worth(2, 0.8) and not k2.worth(2, 0.7)
    one = CalibratedStop(cm, K=2, seconds_per_token=0.040, per_draft=True)  # 20/2 + 5 ms
    assert one.worth(2, 0.4) and not one.worth(2, 0.35)
    best = cm.predict("sd", 1, 8)
    assert cm.draft_stop(best).seconds_per_token == pytest.approx(1.0 / best.tok_per_s)


def test_calibrated_stop_looks_past_a_step_of_the_verify_curve() -> None:
    # a staircase: the 5th verify row costs 30 ms, the next seven 10 ms together (CPU kernels
    # work in blocks of rows); one more draft token at depth 4 costs 10 + 30 ms
    stair = CostCurve([1, 4, 5, 12], [0.070, 0.085, 0.115, 0.125])
    cm = CostModel(stair, linear(0.010, 0.010), acceptance=Acceptance(accepted=90.0, trials=100.0))
    stop = CalibratedStop(cm, K=1, seconds_per_token=0.040)
    # the next token alone: 0.9 x 40 ms = 36 ms < 40 ms; with the one after it (at the pair's
    # 0.885): 36 + 31.9 ms > two draft steps + rows 5-6 (20 + 31.4 ms): it drafts on
    assert stop.worth(4, 0.9)
    assert not stop.worth(4, 0.5)  # no extension pays at half the chance
    # on a curve without steps the next row decides alone: the lookahead changes nothing
    flat = CalibratedStop(CostModel(linear(0.070, 0.005), linear(0.010, 0.010),
                                    acceptance=Acceptance(accepted=99.0, trials=100.0)), K=1, seconds_per_token=0.040)
    assert flat.worth(2, 0.38) and not flat.worth(2, 0.37)  # 15 ms per token: p x 40 ms against it


def test_auto_shortens_drafts_only_where_that_stays_exact() -> None:
    """The dynamic length is exact for single drafts and at T = 0; with K >= 2 drafts at
    T > 0 a JOINT length biases mdbv (tests/test_verify_exact.py), so there each draft ends
    by its own path (per_draft), and spectr-gbv, not enumerated that way, keeps a fixed L."""
    from types import SimpleNamespace

    from localspec.config import SamplingConfig
    from localspec.decode.policy.auto import _decide
    from localspec.events import Stats

    cm = CostModel(linear(0.070, 0.002), linear(0.005, 0.001), acceptance=Acceptance(prior=0.9))

    def settings(temp: float, K: int):
        cfg = GenConfig(method="auto", K=K, auto_L=True, sampling=SamplingConfig(temp=temp))
        return _decide(cm, SimpleNamespace(cfg=cfg, stats=Stats(), draft=None))

    multi = settings(0.7, 2)
    assert multi is not None and multi.method == "mdbv" and multi.K == 2
    assert multi.stop is not None and multi.per_draft
    single = settings(0.7, 1)
    assert single is not None and single.K == 1 and single.stop is not None and single.L >= 16
    assert not single.per_draft
    greedy_multi = settings(0.0, 2)
    assert greedy_multi is not None and greedy_multi.stop is not None and not greedy_multi.per_draft
    from localspec.costmodel import Prediction, dynamic_length

    hot = GenConfig(method="auto", K=2, auto_L=True, sampling=SamplingConfig(temp=0.7))
    assert not dynamic_length(hot, Prediction("spectr-gbv", 2, 4, 1.0, 1.0, 1.0))
    assert dynamic_length(hot, Prediction("spectr", 2, 4, 1.0, 1.0, 1.0))


def test_explain_shows_the_dynamic_length_and_its_calibration(tmp_path, monkeypatch) -> None:
    from pathlib import Path
    from types import SimpleNamespace

    from localspec.config import SamplingConfig
    from localspec.costmodel import explain, model_for

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))

    def ctx(name: str):
        return SimpleNamespace(model=SimpleNamespace(path=Path(name)))

    cm = CostModel(linear(0.070, 0.002), linear(0.005, 0.001), acceptance=Acceptance(prior=0.9))
    t, d = ctx("t.gguf"), ctx("d.gguf")
    greedy = explain(model_for(t, d, True, cm), GenConfig(method="auto", auto_L=True))
    assert "choice: sd K=1" in greedy and "draft length: up to 16, decided token by token" in greedy
    assert "0.9-1.0: 0.95 (n=0)" in greedy  # no evidence yet: the bin's own confidence
    multi = explain(model_for(t, d, False, cm), GenConfig(method="auto", K=2, auto_L=True, sampling=SamplingConfig(temp=0.7)))
    assert "choice: mdbv K=2" in multi and "for each draft on its own path" in multi


def test_explain_prices_each_lookup_per_match_length() -> None:
    """--explain's lookup section: per proposer and matched length, the gate's estimate, its
    bet, the counts, and the length it would draft with the speedup it predicts (exactly
    best_length's); a proposer with no evidence says so; a method other than auto says
    lookups are not gated there; no lookup named, no section."""
    from localspec.costmodel import explain
    from localspec.costmodel.explain import _drafts
    from localspec.costmodel.lookup import LOOKUP_LONG_L, LOOKUP_MAX_L, LookupGate

    cfg = GenConfig(method="auto", spec_type=("ngram", "suffix"))
    cfg.validate()
    fresh = explain(None, cfg)  # before any turn: no cost model, no gate
    # ngram starts from the shipped priors (one row per fitted match length), suffix from none
    assert "shipped prior" in fresh and "ngram: no lookup evidence yet" not in fresh
    assert "suffix: no lookup evidence yet" in fresh
    assert "alpha 0.50, bet at 0.90" in fresh and "L=" not in fresh  # no target curve to price with
    steep = CostCurve([1, 2, 4, 8, 16], [0.028, 0.047, 0.072, 0.127, 0.148])  # a 2-core CPU's
    cm = CostModel(steep, linear(0.005, 0.001))
    cm.lookup = gate = LookupGate()
    for _ in range(20):
        gate.update(("ngram", 2, "answer"), 0, 8)  # 2-token matches in the answer: always wrong at once
        gate.update(("ngram", 6, "prompt"), 8, 8)  # 6-token matches in the prompt: always right
    lines = explain(None, cfg, cm).splitlines()
    rows = {ln.split()[0]: ln.split() for ln in lines if ln.split()[:1] in (["2"], ["6"]) and "prior" not in ln}
    bad, good = ("ngram", 2, "answer"), ("ngram", 6, "prompt")
    assert rows["2"][1:5] == ["answer", f"{gate.alpha(bad):.2f}", f"{gate.optimistic_alpha(bad):.2f}", "0/20"]
    assert rows["2"][5:7] == ["none", "(no"]  # a lookup that keeps failing does not pay on this curve
    L, gain = gate.best_length(steep, good, LOOKUP_MAX_L)
    assert L >= 8 and gain > 1.5 and rows["6"][1] == "prompt" and rows["6"][4] == "160/160"
    assert " ".join(rows["6"][5:]).startswith(f"L={L} (predicted {gain:.2f}x AR per lookup iteration")
    # where 32 rows cost far less than twice 16 (a CPU's repacked kernels), a long copy bets longer
    cheap32 = CostCurve([1, 2, 4, 8, 16, 32], [0.028, 0.047, 0.072, 0.127, 0.148, 0.200])
    long_L, long_gain = gate.best_length(cheap32, good, LOOKUP_LONG_L)
    assert long_L > LOOKUP_MAX_L and f"inside a copy of 12+ tokens L={long_L} ({long_gain:.2f}x)" in _drafts(gate, cheap32, good)
    assert any(ln.strip().startswith("suffix: no lookup evidence yet") and "-> L=" in ln for ln in lines)
    sd = GenConfig(method="sd", spec_type=("ngram", "draft"), L=6)
    sd.validate()
    assert "draft whenever the history has a match, up to L=6" in explain(None, sd, cm)
    assert "lookups (" not in explain(cm, GenConfig(method="sd"))  # the draft model alone: its table only


def test_measure_times_every_block_size_and_lets_a_cheaper_bigger_batch_win(monkeypatch) -> None:
    """The F16 target on 2 threads is not smooth in n (9 tokens cheaper than 8): measure each
    size a draft block can take, and cost n at most what a bigger batch costs."""
    from localspec import costmodel

    clock = [0.0]
    cost = {n: 0.070 + 0.010 * (n - 1) for n in range(1, 65)}
    cost[9] = cost[8] - 0.005  # a kernel that likes odd sizes

    class FakeBatch:
        def __init__(self) -> None:
            self.n = 0

        def clear(self):
            self.n = 0
            return self

        def add(self, *a, **kw) -> int:
            self.n += 1
            return self.n - 1

        def add_sequence(self, toks, *a, **kw) -> int:
            self.n += len(toks)
            return self.n - 1

    class FakeCtx:
        n_seq_max, n_batch, n_decodes, n_evaluated = 2, 512, 0, 0
        batch = FakeBatch()

        def decode(self) -> None:
            clock[0] += cost.get(self.batch.n, 0.0)

        def seq_rm(self, *a) -> None:
            pass

        def pos_max(self, seq: int) -> int:
            return 63  # the 64 context tokens stay (nothing runs between two decodes here)

    monkeypatch.setattr(costmodel.time, "perf_counter", lambda: clock[0])
    c = costmodel.measure(FakeCtx(), reps=2)
    assert set(range(1, 25)) <= set(c.sizes)
    assert c(9) == pytest.approx(cost[9]) and c(8) == pytest.approx(cost[9])  # 8 costs what 9 does
    assert c(7) == pytest.approx(cost[7]) and c(10) == pytest.approx(cost[10])
    assert all(b >= a for a, b in zip(c.seconds, c.seconds[1:], strict=False))


def test_auto_myopic_is_auto_with_the_next_token_rule() -> None:
    """bench speed's `auto-myopic` column: the same auto, its draft length priced on the next
    token alone (GenConfig.draft_lookahead 1), so the lookahead is measured side by side."""
    import argparse

    from localspec.bench.speed import parse_grid

    cols = {s.label: s for s in parse_grid(["auto", "auto-myopic"], [])}
    assert set(cols) == {"ar", "auto", "auto myopic"}
    a = argparse.Namespace(n_predict=16, draft_temp=None)
    assert cols["auto"].gen(a, 0).draft_lookahead == 8 and cols["auto myopic"].gen(a, 0).draft_lookahead == 1
    cm = CostModel(linear(0.070, 0.005), linear(0.010, 0.010))
    assert cm.draft_stop(cm.predict("sd", 1, 8), lookahead=1).lookahead == 1

