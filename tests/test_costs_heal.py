"""The cost model heals: live timings correct a cached curve that lies, and it says so.

Curves timed while the machine was busy used to stay in the cache for good (a 2.5x slow
target curve made `auto` speculate where it cannot pay). Every decode of a known size is a
free measurement: these tests poison the cache and check that one turn brings the curves
back and `auto` back to the decision a fresh cache makes.
"""

from __future__ import annotations

import json

import pytest

from localspec import costmodel
from localspec.config import GenConfig
from localspec.costmodel import N_BINS, Acceptance, CostCurve
from localspec.costmodel.curves import curve_path, load_curve
from localspec.events import Progress
from tests.support.helpers import session
from tests.support.timing import clock_decodes


def test_a_slow_sample_never_replaces_a_quiet_one_but_a_persistent_state_wins() -> None:
    c = CostCurve([1, 2, 4], [0.010, 0.012, 0.016])
    for _ in range(7):
        c.observe(1, 0.030)  # contended: slower, but not for a whole window
    assert c(1) == pytest.approx(0.010) and not c.healed
    c.observe(1, 0.030)  # the 8th in a row: the machine really is slower now
    assert c(1) == pytest.approx(0.030) and c.contended  # 3x off: a busy machine's price
    assert c(4) == pytest.approx(0.016 * 3.0)  # sizes not seen live follow the level
    # ... while it lasts: the quiet price is what is kept (tests/test_costs_recovery.py)
    assert c.quiet(1) == pytest.approx(0.010) and not c.healed and not c.stale


def test_a_size_timed_low_is_raised_by_a_window_that_says_so() -> None:
    """A flat head (sizes 1-4 alike, timed 17 % low at 2) misprices the verify of short
    drafts: a window of 8 live samples whose minimum is >10 % above raises it; samples 5 %
    above (noise) never do."""
    c = CostCurve([1, 2, 4], [0.0100, 0.0100, 0.0120])
    for _ in range(20):
        c.observe(2, 0.0105)
    assert c(2) == pytest.approx(0.0100) and not c.healed
    for i in range(8):
        c.observe(2, 0.0117 + 0.0001 * (i % 2))
    assert c(2) == pytest.approx(0.0117) and not c.stale


def test_a_raised_size_is_tried_again_by_the_next_process() -> None:
    """A window from a busier day raised 16 rows 1.4x (below CONTENTION: kept, saved).
    auto then bet around the dear size and nothing lowered it again. Now a raised size is
    priced at the curve's level until a process has seen it live twice: quiet samples lower
    it for good, a raise that was real stands after those two."""
    c = CostCurve([1, 8, 16, 17], [0.030, 0.200, 0.280, 0.320])
    for _ in range(2):
        c.observe(1, 0.028)
        c.observe(8, 0.175)
    for _ in range(8):
        c.observe(16, 0.370)
    assert c.healed[16] == pytest.approx(0.370) and c.raised == {16} and not c.contended
    assert c(16) == pytest.approx(0.370)  # this process saw it: its own price
    saved = json.loads(json.dumps(c.to_json()))
    later = CostCurve.from_json(saved)
    level = later.measured(16) * later.scale
    assert later.raised == {16} and later(16) == pytest.approx(level) and level < 0.28
    later.observe(16, 0.280)
    later.observe(16, 0.275)  # quiet: the raise was the busy day's
    assert later.healed[16] == pytest.approx(0.275) and not later.raised and later(16) == pytest.approx(0.275)
    real = CostCurve.from_json(saved)
    for _ in range(2):
        real.observe(16, 0.372)  # the machine really is this slow at 16 rows
    assert real(16) == pytest.approx(0.370) and real.raised == {16}
    del saved["raised"]  # a file from before raises were recorded: sizes above the level
    assert CostCurve.from_json(saved).raised == {16}


def test_quiet_samples_lower_a_curve_at_once() -> None:
    c = CostCurve([1, 2, 4], [0.025, 0.030, 0.040])
    for s in (0.011, 0.010):
        c.observe(2, s)
    assert c(2) == pytest.approx(0.010)
    assert c(1) == pytest.approx(0.025 / 3.0)  # the level moved with it


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    return tmp_path


class DecodeClock:
    """A clock that only decodes move: each llama_decode of n tokens takes `cost(n)` seconds.

    The cost model reads time in two places (timing a curve, curves.py; the live samples it
    heals from, backend/context.py); both get this clock, so what these tests assert cannot
    depend on how busy the machine is (a real-clock version failed on a loaded machine).
    A llama_decode that is not a full-logits batch of the sizes below still advances it."""

    def __init__(self, cost) -> None:
        self.now = 0.0
        self.cost = cost

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture()
def clock(monkeypatch):
    """Every decode of n tokens costs 10 ms + 1 ms x n, target and draft alike (the draft
    costs what the target does, so speculation cannot pay, as on SmolLM2's real pair)."""
    c = DecodeClock(lambda n: 0.010 + 0.001 * n)

    def advance(ctx, n: int) -> None:
        c.now += c.cost(n)

    clock_decodes(monkeypatch, c.perf_counter, advance)
    return c


def _choice(sess, cfg) -> str:
    return next(line for line in sess.explain(cfg).splitlines() if line.startswith("choice:"))


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
@pytest.mark.parametrize("poison", ["one-token", "whole-curve"])
def test_poisoned_cache_is_healed_within_one_turn(home, clock, smollm2_path, smollm2_q8_path, poison) -> None:
    """A near-identical draft (every draft token accepted, as this pair's saved history says)
    still cannot beat AR on SmolLM2, whose batch cost is steep. A target curve timed 2.5x
    slow at one token makes AR look slow and speculation look paying; 2.5x slow everywhere
    leaves the decision alone but every prediction wrong. One turn must heal both."""
    s = session(smollm2_path, smollm2_q8_path)
    history = Acceptance(accepted=400.0, trials=400.0, bin_accepted=[200.0] * N_BINS, bin_trials=[200.0] * N_BINS)
    history.save(Acceptance.path(s.target.ctx, s.draft.ctx, True))
    # the draft model's decision is what heals here: no prompt lookups in the AR phases
    cfg = GenConfig(method="auto", n_predict=240, auto_K=True, auto_L=True, seed=0, spec_type=("draft",))
    fresh = _choice(s, cfg)  # times both curves (first estimate) into the empty cache
    assert fresh.startswith("choice: ar"), fresh
    quiet_t1 = s.costs.target(1)
    p = curve_path(s.target.ctx)
    d = json.loads(p.read_text())
    # timed while the machine was busy
    d["seconds"] = [v * 2.5 if poison == "whole-curve" or i == 0 else v for i, v in enumerate(d["seconds"])]
    p.write_text(json.dumps(d))
    s.costs = None
    poisoned = _choice(s, cfg)
    assert quiet_t1 == pytest.approx(0.011)  # the clock's cost, timed exactly
    assert s.costs.target(1) == pytest.approx(2.5 * quiet_t1)
    prompt = [{"role": "user", "content": "Write the numbers from 1 to 100, separated by commas."}]
    done = list(s.generate(prompt, cfg))[-1]
    if poison == "one-token":
        assert poisoned.startswith("choice: sd"), poisoned  # the lie makes speculation look good
        assert done.stats.ran.startswith("sd") and "then ar" in done.stats.ran, done.stats.ran
    # healed within the turn: the target's level is back at the quiet one (the clock is
    # exact, so it is the same number) ...
    assert s.costs.target(1) == pytest.approx(quiet_t1)
    assert done.stats.ran.endswith("ar"), done.stats.ran  # ... and the turn ends on a fresh cache's choice
    assert done.stats.ar_estimate == pytest.approx(1 / quiet_t1)  # what the TUI shows
    # what was persisted is marked stale (2.5x off), healed sizes and level included; no turn
    # re-times it (that made a busy server's requests wait seconds, issue 24): a fresh
    # session's cost model loads it as healed, and the turn that loads it times nothing
    persisted = load_curve(s.target.ctx)
    assert persisted is not None and persisted.stale and persisted(1) == pytest.approx(quiet_t1)
    s.costs = None
    events = list(s.generate([{"role": "user", "content": "Say hi."}], GenConfig(method="auto", n_predict=4)))
    assert not any(isinstance(e, Progress) for e in events)
    assert events[-1].stats.timing_seconds == 0.0
    assert s.costs.target.stale and s.costs.target(1) == pytest.approx(quiet_t1)
    s.close()


@pytest.mark.slow  # times all 27 batch sizes x 5
def test_recalibrate_times_every_size_once(home, smollm2_path, smollm2_q4_0_path) -> None:
    s = session(smollm2_path, smollm2_q4_0_path, recalibrate=True)
    cfg = GenConfig(method="auto", n_predict=4, auto_K=True, auto_L=True)
    events = list(s.generate("Once upon a time", cfg))
    timed = [e for e in events if isinstance(e, Progress)]
    assert timed and timed[-1].message.endswith(f"{len(costmodel.BATCH_SIZES)}/{len(costmodel.BATCH_SIZES)} batch sizes")
    again = list(s.generate("Once upon a time", cfg))
    assert not any(isinstance(e, Progress) for e in again)  # once per session
    s.close()
