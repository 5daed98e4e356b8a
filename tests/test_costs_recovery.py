"""A busy minute cannot lock speculation out (issue 40): contention is priced while it
lasts, never saved, ended by a quiet sample, re-tested by auto's probe, and a small
draft's step dearer than its target's is contention, not the pair's truth.

The session scenario runs the real SmolLM2 pair on an injected clock (each llama_decode
advances it by a price the test sets per model and per phase: quiet or busy), so the
bound it checks cannot depend on how loaded the machine running the tests is.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from localspec import costmodel
from localspec.config import GenConfig
from localspec.costmodel import CostCurve, CostModel, contention
from localspec.costmodel.curves import CONTENTION, QUICK_SIZES, curve_path, load_curve, save_curve
from localspec.decode.policy.auto import FIRST_PROBE, _could_pay
from tests.support.helpers import session
from tests.support.timing import clock_decodes

# --------------------------------------------------------------------------- the curve


def test_contention_is_priced_while_it_lasts_and_never_saved() -> None:
    """A window 30x the quiet price prices decisions (the machine is that slow now), but
    what is saved is the quiet curve, and one sample back near it ends the contention and
    drops the contention-era samples (a window is not half full of them afterwards)."""
    c = CostCurve([1, 4, 16], [0.002, 0.003, 0.006])
    for _ in range(8):
        c.observe(1, 0.060)
    assert c.contended and c(1) == pytest.approx(0.060) and c(16) == pytest.approx(0.006 * 30)
    assert c.quiet(1) == pytest.approx(0.002)
    assert CostCurve.from_json(json.loads(json.dumps(c.to_json())))(1) == pytest.approx(0.002)
    assert not c.dirty  # nothing quiet was learned: nothing to save
    c.observe(1, 0.0021)
    assert not c.contended and c(1) == pytest.approx(0.002) and c(16) == pytest.approx(0.006)
    assert c.live[1] == [0.0021]
    for _ in range(7):  # the old busy window is gone: seven slow samples raise nothing
        c.observe(1, 0.060)
    assert not c.contended


def test_a_moderate_raise_is_kept_as_the_quiet_price() -> None:
    """A first estimate 20 % low (issue 15's flat head) is corrected and saved as before:
    below CONTENTION a persistent window is the machine, not a busy minute."""
    c = CostCurve([1, 4], [0.010, 0.016])
    for _ in range(8):
        c.observe(4, 0.0192)
    assert not c.contended and c.healed == {4: pytest.approx(0.0192)} and c.dirty
    assert 0.0192 / 0.016 < CONTENTION


def test_a_quiet_sample_below_a_stale_curve_heals_it_even_while_contended() -> None:
    c = CostCurve([1, 4], [0.030, 0.040])  # timed on a busy machine
    for _ in range(8):
        c.observe(4, 0.200)
    assert c.contended
    c.observe(1, 0.010)
    c.observe(1, 0.010)
    assert not c.contended and c.quiet(1) == pytest.approx(0.010) and c.stale


def test_a_cache_an_older_version_poisoned_is_read_without_the_busy_prices(tmp_path, monkeypatch) -> None:
    """Issue 40's file: the draft's 1-token price 1.404 s (59x) healed in, the level 59x,
    marked stale. Read now, the busy entry is gone, the level is the quiet one's, and the
    next save writes the quiet curve."""
    d = {"sizes": [1, 2, 4], "seconds": [0.0237, 0.0300, 0.0400], "healed": {"1": 1.404, "2": 0.0290},
         "scale": 59.29, "stale": True}
    c = CostCurve.from_json(d)
    assert c.healed == {2: pytest.approx(0.0290)} and c.scale == pytest.approx(0.029 / 0.030)
    assert c(1) == pytest.approx(0.0237 * c.scale) and not c.stale and c.dirty


def test_the_probe_is_decided_on_quiet_prices() -> None:
    """A draft a busy minute priced out still gets its probe (else nothing would ever
    lower its price: issue 40); a pair whose quiet prices cannot pay gets none."""
    target = CostCurve([1, 16], [0.020, 0.028])
    draft = CostCurve([1, 16], [0.002, 0.004])
    cm = CostModel(target, draft)
    assert _could_pay(cm)
    for _ in range(8):
        draft.observe(1, 0.120)
    assert cm.contended and cm.choose(GenConfig(method="auto", auto_L=True))[0] is None
    assert _could_pay(cm)  # probed all the same
    assert "draft contended (60.0x its quiet price" in cm.prices()
    slow = CostModel(CostCurve([1, 16], [0.020, 0.200]), CostCurve([1, 16], [0.030, 0.040]))
    assert not _could_pay(slow)


def test_explain_and_the_tui_say_what_is_predicted_and_what_a_busy_machine_priced() -> None:
    """--explain labels its rows predictions and names contended prices; the TUI's speedup
    row says its AR figure is predicted, and from which prices."""
    from dataclasses import replace

    from localspec.costmodel import explain
    from localspec.tui.stats import PanelInfo, render_stats
    from tests.support.replay import demo_turns

    cm = CostModel(CostCurve([1, 16], [0.020, 0.028]), CostCurve([1, 16], [0.002, 0.004]))
    cfg = GenConfig(method="auto", auto_L=True, spec_type=("draft",))
    quiet = explain(cm, cfg)
    assert "every row is a prediction" in quiet and "prices:" not in quiet
    for _ in range(8):
        cm.draft.observe(1, 0.040)
    busy = explain(cm, cfg)
    assert "prices: draft contended (20.0x its quiet price: a busy machine; not saved, re-tested)" in busy

    stats = replace(demo_turns()[0][-1].stats, ar_estimate=20.0)
    panel = render_stats(stats, PanelInfo(method="auto")).plain
    assert "predicted (cost model)" in panel and "prices:" not in panel
    panel = render_stats(replace(stats, prices=cm.prices()), PanelInfo(method="auto")).plain
    assert "predicted (contended or stale prices)" in panel and "prices: draft contended" in panel


# --------------------------------------------------------------------------- the ceiling


def _ctx(path: Path, key: str = "CPU:31|fa=auto|kvo=1|t=2"):
    return types.SimpleNamespace(model=types.SimpleNamespace(path=path), placement_key=key, threads=2)


def test_a_small_drafts_step_dearer_than_the_targets_is_contention(tmp_path) -> None:
    """A draft at most half the target's file size, on the same devices: a draft price
    above the target's quiet price is contention even below CONTENTION x its own, and a
    saved draft price above it is dropped; on other devices (a GPU target) no bound."""
    big, small = tmp_path / "t.gguf", tmp_path / "d.gguf"
    big.write_bytes(b"x" * 1000)
    small.write_bytes(b"x" * 400)
    t, d = _ctx(big, "CPU:29|fa=auto|kvo=1|t=2"), _ctx(small, "CPU:25|fa=auto|kvo=1|t=2")
    target = CostCurve([1, 8], [0.040, 0.060])
    draft = CostCurve([1, 8], [0.030, 0.050], healed={8: 0.090})  # a busy minute's, saved by an older cache
    contention.settle(t, d, target, draft)
    assert draft.healed == {} and draft.ceiling is not None
    for _ in range(8):
        draft.observe(1, 0.042)  # 1.4x its quiet price, but dearer than the target's step
    assert draft.contended and draft.quiet(1) == pytest.approx(0.030)
    gpu = _ctx(big, "CUDA0:29,CPU:0|fa=auto|kvo=1|t=2")
    assert contention.draft_ceiling(gpu, d, target) is None
    assert contention.draft_ceiling(t, _ctx(big), target) is None  # not much smaller
    assert contention.implausible(t, d, target, CostCurve([1, 8], [0.050, 0.070]))
    assert not contention.implausible(t, d, target, CostCurve([1, 8], [0.030, 0.050]))


def test_a_draft_timed_dearer_than_its_target_is_timed_again_once(tmp_path, monkeypatch) -> None:
    """A small draft's cached curve above its target's (timed while the machine was busy)
    is in the timing plan, once per process: a machine where it stays so is not re-timed
    at every turn."""
    from localspec.costmodel import curves
    from localspec.costmodel.curves import curve_key

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    monkeypatch.setattr(curves, "TIMED_HERE", set())
    monkeypatch.setattr(costmodel, "TIMED_HERE", curves.TIMED_HERE)
    big, small = tmp_path / "t.gguf", tmp_path / "d.gguf"
    big.write_bytes(b"x" * 1000)
    small.write_bytes(b"x" * 300)
    t, d = _ctx(big), _ctx(small)
    save_curve(t, CostCurve([1, 8], [0.040, 0.060]))
    save_curve(d, CostCurve([1, 8], [0.030, 0.050]))
    assert costmodel.timing_plan(t, d, None) == []
    save_curve(d, CostCurve([1, 8], [0.090, 0.120]))
    assert costmodel.timing_plan(t, d, None) == [d]
    curves.TIMED_HERE.add(curve_key(d))  # what timing_steps notes once it timed it
    assert costmodel.timing_plan(t, d, None) == []


# --------------------------------------------------------------------------- the session


class Machine:
    """An injected clock: each llama_decode of n tokens advances it by the model's price in
    the current phase (quiet or busy); the cost model's timings and live samples read it."""

    QUIET = {"target": (0.020, 0.0005), "draft": (0.002, 0.0002)}  # (fixed, per token) seconds
    BUSY = {"target": 2.5, "draft": 30.0}  # a C++ build beside it: the draft's threads starve most

    def __init__(self) -> None:
        self.now = 0.0
        self.busy = False
        self.ptrs: dict[int, str] = {}

    def price(self, role: str, n: int) -> float:
        fixed, per = self.QUIET[role]
        return (fixed + per * n) * (self.BUSY[role] if self.busy else 1.0)

    def perf_counter(self) -> float:
        return self.now

    def watch(self, sess) -> None:
        """Price the decodes of this session's contexts, and cache their quiet curves."""
        for role, st in (("target", sess.target), ("draft", sess.draft)):
            self.ptrs[id(st.ctx.ptr)] = role
            save_curve(st.ctx, CostCurve(list(QUICK_SIZES), [self.price(role, n) for n in QUICK_SIZES]))


@pytest.fixture()
def machine(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    m = Machine()

    def advance(ctx, n: int) -> None:
        role = m.ptrs.get(id(ctx))
        if role is not None:
            m.now += m.price(role, n)

    clock_decodes(monkeypatch, m.perf_counter, advance)
    return m


PROMPT = [{"role": "user", "content": "Write the numbers from 1 to 100, separated by commas."}]


def _turn(s, n: int = 40):
    cfg = GenConfig(method="auto", n_predict=n, seed=0, K=1, L=4, spec_type=("draft",))
    return list(s.generate(PROMPT, cfg))[-1]


@pytest.mark.slow  # four real turns and a restart (~10 s on 2 cores)
def test_busy_then_quiet_brings_speculation_back_within_one_turn_and_across_a_restart(
        machine, smollm2_path, smollm2_q8_path) -> None:
    """Quiet: auto speculates. Busy (draft steps 30x, target 2.5x): the draft's price
    rises within the turn and auto falls back to AR, as it should on that machine. Quiet
    again: the next turn speculates again after at most FIRST_PROBE plain tokens and one
    probe (the bound docs/performance.md gives), and nothing busy was saved: a restarted
    session speculates from its first decision."""
    s = session(smollm2_path, smollm2_q8_path)
    machine.watch(s)
    quiet = _turn(s)
    assert quiet.stats.ran.startswith("sd"), quiet.stats.ran
    assert not quiet.stats.prices

    machine.busy = True
    busy = _turn(s, 80)
    assert busy.stats.ran.startswith("sd") and busy.stats.ran.endswith("ar"), busy.stats.ran
    assert s.costs.draft.contended and "draft contended" in busy.stats.prices
    assert "prices: " in busy.stats.choice_note and "draft contended" in busy.stats.choice_note
    saved = load_curve(s.draft.ctx)
    assert saved is not None and saved(1) == pytest.approx(machine.price("draft", 1) / 30.0)
    assert json.loads(curve_path(s.draft.ctx).read_text())["scale"] == pytest.approx(1.0)

    machine.busy = False
    back = _turn(s)
    assert back.stats.ran.startswith("ar then sd"), back.stats.ran
    ar_tokens = back.stats.iterations - len(back.stats.accepted_lengths)  # plain steps before the probe
    assert ar_tokens <= FIRST_PROBE + 1, back.stats
    assert not s.costs.contended and not back.stats.prices
    s.close()

    restarted = session(smollm2_path, smollm2_q8_path)
    machine.ptrs = {id(restarted.target.ctx.ptr): "target", id(restarted.draft.ctx.ptr): "draft"}
    first = _turn(restarted)
    assert first.stats.ran.startswith("sd") and first.stats.predicted[0][0] > 1.0, first.stats
    assert costmodel.load_curve(restarted.draft.ctx).scale == pytest.approx(1.0)
    restarted.close()
