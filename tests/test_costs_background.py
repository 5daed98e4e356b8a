"""Cost-model timing never blocks a reply (issue 24): a background timer, turns that run
meanwhile, a stale curve that is never re-timed, a foreground timing that stops.

The timing itself is a stand-in (tests/support/timing.py's HeldTiming): each batch size
waits until the test lets it run, so what a generation does while a step is in flight is decided by events, never by
how busy the machine is. The generations are real (the SmolLM2 pair, a few tokens).
"""

from __future__ import annotations

import threading

import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.costmodel import CostCurve, curves, gate
from localspec.costmodel.curves import load_curve, save_curve
from localspec.events import Done, Progress
from tests.support.helpers import session
from tests.support.timing import SIZES, HeldTiming, fresh_costs, wait_for  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("fresh_costs")  # no curves cached, a timer that never waits

PROMPT = [{"role": "user", "content": "Write the numbers from 1 to 20, separated by commas."}]
N = 12


def auto(**kw) -> GenConfig:
    return GenConfig(method="auto", n_predict=N, seed=0, sampling=SamplingConfig(temp=0.0),
                     auto_K=True, auto_L=True, **kw)


def turn_in_thread(s, cfg: GenConfig, fake: HeldTiming) -> tuple[threading.Thread, dict]:
    """Run one generation on its own thread, noting how many timing steps had begun at each
    of its events (a step that began mid-turn would show there)."""
    out: dict = {"seen": []}

    def run() -> None:
        for ev in s.generate(PROMPT, cfg):
            if isinstance(ev, Done):
                out["done"] = ev
            else:
                out["seen"].append(fake.entered)

    th = threading.Thread(target=run)
    th.start()
    return th, out


def test_turns_during_background_timing_wait_for_one_step_at_most(smollm2_path, smollm2_q4_0_path, monkeypatch) -> None:
    """A turn that starts while a batch size is being timed waits for that one step only,
    no step runs during the turn, and the turn runs what needs no missing curve: plain
    decoding before the target's curve is there, prompt lookups (no draft model) after;
    the answer is AR's either way. Once timing ends, auto decides with the whole model."""
    fake = HeldTiming()
    monkeypatch.setattr(curves, "timing_steps", fake)
    s = session(smollm2_path, smollm2_q4_0_path)
    ref = [e for e in s.generate(PROMPT, GenConfig(method="ar", n_predict=N))][-1]
    s.start_timing(auto())
    fake.wait_entered(1)  # the target's first size is in flight
    assert s.timing_progress == (0, 2 * SIZES)

    th, out = turn_in_thread(s, auto(), fake)
    wait_for(lambda: s._costing.gate.waiting == 1)  # the turn waits for that step ...
    fake.allow(1)  # ... which ends now
    th.join(20)
    done = out["done"]
    assert set(out["seen"]) == {1}  # no step began while the turn ran
    assert done.text == ref.text and done.stats.ran == "ar" and done.stats.draft_calls == 0
    assert f"still timing this machine (1/{2 * SIZES} batch sizes)" in done.stats.choice_note
    assert done.stats.timing_seconds > 0  # what it waited for is in its stats

    fake.allow(SIZES - 1)  # the target's curve is done; the draft's first size begins
    fake.wait_entered(SIZES + 1)
    th, out = turn_in_thread(s, auto(), fake)
    wait_for(lambda: s._costing.gate.waiting == 1)
    fake.allow(1)
    th.join(20)
    done = out["done"]
    assert set(out["seen"]) == {SIZES + 1}
    assert done.text == ref.text and done.stats.draft_calls == 0  # no draft model while its curve is timed
    assert f"still timing this machine ({SIZES + 1}/{2 * SIZES}" in done.stats.choice_note
    assert "prompt lookup where it pays" in done.stats.choice_note

    fake.allow(SIZES - 1)
    wait_for(lambda: s.timing_progress is None)
    events = list(s.generate(PROMPT, auto()))
    done = events[-1]
    assert not any(isinstance(e, Progress) for e in events) and done.stats.timing_seconds == 0.0
    assert "timing" not in done.stats.choice_note and done.text == ref.text
    assert s.costs is not None and s.costs.target.sizes == [1, 64] and s.costs.draft.sizes == [1, 64]
    assert fake.entered == fake.finished == 2 * SIZES  # each size once, and nothing after
    s.close()


def test_a_timer_that_never_gets_a_quiet_moment_still_finishes(smollm2_path, smollm2_q4_0_path,
                                                               monkeypatch) -> None:
    """Turns back to back leave the timer no quiet moment; once it waited `STARVED` for one,
    it takes one step at each turn's end (the next turn waits for it), never one inside a
    turn, until the timing is done."""
    monkeypatch.setattr(gate, "QUIET", 3600.0)  # never quiet
    monkeypatch.setattr(gate, "STARVED", 0.2)
    fake = HeldTiming(held=False)
    monkeypatch.setattr(curves, "timing_steps", fake)
    s = session(smollm2_path, smollm2_q4_0_path)
    s.start_timing(auto())
    cfg = GenConfig(method="ar", n_predict=2)  # the turns need no cost model: they just keep it busy
    turns = 0
    while s.timing_progress is not None:
        assert turns < 500, "the timer starved"
        seen = set()
        for _ in s.generate(PROMPT, cfg):
            seen.add(fake.entered)
        assert len(seen) == 1  # no step began inside the turn
        turns += 1
    assert fake.finished == 2 * SIZES and s.costs is None  # timed, built at the next auto turn
    assert list(s.generate(PROMPT, auto()))[-1].stats.timing_seconds == 0.0
    s.close()


def test_a_stale_curve_is_not_re_timed_and_keeps_healing(smollm2_path, smollm2_q4_0_path, monkeypatch) -> None:
    """A cached curve marked stale is used as it is (healed sizes and level), by the
    background timer and by a turn alike: nothing is timed, and live decodes heal it."""
    fake = HeldTiming(held=False)
    monkeypatch.setattr(curves, "timing_steps", fake)
    s = session(smollm2_path, smollm2_q4_0_path)
    for ctx in (s.target.ctx, s.draft.ctx):
        save_curve(ctx, CostCurve([1, 64], [0.5, 0.9], stale=True))  # far too slow: 1.5x off and more
    s.start_timing(auto())
    assert s.timing_progress is None  # nothing to time
    done = list(s.generate(PROMPT, auto()))[-1]
    assert fake.entered == 0 and done.stats.timing_seconds == 0.0
    assert "timing" not in done.stats.choice_note
    healed = load_curve(s.target.ctx)
    assert healed is not None and healed.stale and healed(1) < 0.5  # healed live, still marked
    s.close()


def test_a_foreground_timing_stops_between_two_sizes_and_resumes(smollm2_path, smollm2_q4_0_path, monkeypatch) -> None:
    """Without a background timer (`localspec run`) the first turn times the cost model, as
    Progress events; a stop (Ctrl-C, a client gone) ends it after the size in flight, and
    the next turn resumes where it stopped."""
    fake = HeldTiming(held=False)
    monkeypatch.setattr(curves, "timing_steps", fake)
    s = session(smollm2_path, smollm2_q4_0_path)
    events = []
    for ev in s.generate(PROMPT, auto()):
        events.append(ev)
        if isinstance(ev, Progress):
            s.stop()
    progress = [e for e in events if isinstance(e, Progress)]
    assert len(progress) == 1 and fake.finished == 1
    done = events[-1]
    assert done.reason == "interrupted" and done.stats.n_tokens == 0
    assert "stopped while the cost model was timing" in done.stats.choice_note
    events = list(s.generate(PROMPT, auto()))
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress[0].message.endswith(f"2/{SIZES} batch sizes") and len(progress) == 2 * SIZES - 1
    assert events[-1].reason == "max_tokens" and events[-1].stats.timing_seconds > 0
    assert fake.finished == 2 * SIZES
    s.close()


def test_the_tui_starts_timing_after_load_and_shows_its_progress() -> None:
    """The chat TUI starts the background timing once the models are loaded; the timer's
    steps show in the status line, and its end clears it."""
    from localspec.tui import LocalspecApp
    from tests.support.replay import FakeSession, demo_turns, fake_factory, wait_until
    from tests.test_tui import run_app

    class Timed(FakeSession):
        def start_timing(self, cfg, progress=None) -> None:
            self.timing_cfg = cfg
            self.report = progress
            progress("timing fake-target on this machine, once: 3/11 batch sizes", 3 / 22)

    fake = Timed(demo_turns())
    cfg = GenConfig(method="auto")
    app = LocalspecApp(fake_factory(fake), cfg)

    async def body(pilot) -> None:
        await wait_until(pilot, lambda: "3/11 batch sizes" in app.status_message)
        assert fake.timing_cfg is cfg
        fake.report("cost model timed in 4.2 s", 1.0)
        await wait_until(pilot, lambda: app.status_message == "")

    run_app(app, body)


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_real_timing_between_generations_leaves_both_right(smollm2_path, smollm2_q4_0_path, monkeypatch) -> None:
    """The real timing, one step at a time between generations whose draft uses the
    timing's scratch sequence (K = n_seq_max - 1) and drops it: every step still times a
    repeat (no step is spent forever rebuilding the context tokens), every answer is AR's
    (a scratch token left in the draft's sequence would change what the target verifies),
    the timing decodes count in no turn's stats, and the curves come out whole."""
    from localspec.costmodel import QUICK_SIZES

    s = session(smollm2_path, smollm2_q4_0_path, n_seq_max=2)
    ref = list(s.generate(PROMPT, GenConfig(method="ar", n_predict=8)))[-1]
    decodes = []
    real = curves._scratch_decode
    monkeypatch.setattr(curves, "_scratch_decode", lambda ctx: decodes.append(ctx) or real(ctx))
    cfg = GenConfig(method="sd", K=1, L=4, n_predict=8, sampling=SamplingConfig(temp=0.0))
    s.start_timing(auto())
    for _ in range(6):  # a turn between any two steps: each drops the context tokens
        seen = len(decodes)
        done = list(s.generate(PROMPT, cfg))[-1]
        assert done.text == ref.text
        assert done.stats.target_calls == len(done.stats.accepted_lengths)  # its own decodes only
        wait_for(lambda seen=seen: len(decodes) > seen)
    progress = s.timing_progress
    assert progress is not None and progress[0] >= 2  # 6 steps timed 6 repeats: 3 sizes of 2
    wait_for(lambda: s.timing_progress is None)
    assert s._costing.error is None
    assert list(s.generate(PROMPT, cfg))[-1].text == ref.text
    for ctx in (s.target.ctx, s.draft.ctx):
        c = load_curve(ctx)
        assert c is not None and c.sizes == list(QUICK_SIZES) and all(v > 0 for v in c.seconds)
    s.close()
