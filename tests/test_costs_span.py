"""A decode's price at its place in the context (costmodel/span.py): k is fitted from live
timings, live timings heal the curve at the timing depth, and prices are asked at the
context's length now."""

from __future__ import annotations

import random

import pytest

from localspec.backend import Context
from localspec.costmodel.curves import DEPTH, CostCurve
from localspec.costmodel.span import MAX_DOUBLING, SpanFit
from tests.support.helpers import model

K = 5e-6  # seconds per row per context position: the Q4 1.5B target's, timed (span.py)
BASE = {1: 0.032, 2: 0.057, 4: 0.100, 8: 0.219, 16: 0.267, 32: 0.433}


def _true(n: int, pos: int) -> float:
    return BASE[n] + K * n * max(pos - DEPTH, 0)


def _curve() -> CostCurve:
    """A curve priced by place, asked at the timing depth (a test moves `where` itself)."""
    sizes = sorted(BASE)
    return CostCurve(sizes, [BASE[n] for n in sizes], where=lambda: DEPTH)


def test_the_slope_is_read_from_bands_far_enough_apart():
    fit, rng = SpanFit(), random.Random(1)
    for pos in (100, 200):  # close together: no slope yet
        for n in (4, 16):
            for _ in range(4):
                fit.add(n, _true(n, pos) * (1 + rng.random() * 0.2), pos)
    assert fit.slope() is None
    for pos in (900, 1500, 1900):
        for n in (4, 16, 32):
            for _ in range(6):
                fit.add(n, _true(n, pos) * (1 + rng.random() * 0.2), pos)
    assert fit.slope()[0] == pytest.approx(K, rel=0.2)


def test_one_row_decodes_and_lone_timings_do_not_count():
    fit = SpanFit()
    for pos in (64, 1800):
        for _ in range(5):
            fit.add(1, _true(1, pos), pos)  # a draft step's jitter is as large as its slope
        fit.add(16, _true(16, pos), pos)  # a band's one timing is no minimum
        fit.add(16, _true(16, pos), pos)
    assert fit.slope() is None
    fit.add(16, _true(16, 64), 64)
    fit.add(16, _true(16, 1800), 1800)
    assert fit.slope() == (pytest.approx(K, rel=0.01), 16 * (1800 - 64))


def test_contention_at_one_end_cannot_make_a_slope_past_doubling_per_thousand_positions():
    fit = SpanFit()
    for _ in range(3):
        fit.add(8, 0.2, 64)
        fit.add(8, 2.0, 1600)  # every timing of the long band came on a busy machine
    assert fit.slope()[0] == pytest.approx(0.2 / (8 * MAX_DOUBLING))


def test_long_prompts_no_longer_raise_what_short_ones_pay():
    """The stop 55 poisoning: 16-row bets only on long copies raised the saved 16-row price
    (358 ms against 259 timed). With positions the curve learns k from the sizes both
    lengths use and heals the long ones at the timing depth."""
    c, blind = _curve(), _curve()
    at = [DEPTH]
    c.where = lambda: at[0]
    for turn in range(6):
        pos = 150 if turn % 2 == 0 else 1400
        for i in range(12):
            for n in ((2, 4, 8) if pos < 1000 else (2, 4, 8, 16)):
                t = _true(n, pos + i * 8) * 1.02
                c.observe(n, t, pos + i * 8)
                blind.observe(n, t)
    assert c.k == pytest.approx(K, rel=0.25)
    assert blind.quiet(16) > BASE[16] * 1.2  # position-blind: the long prompts' price
    assert c.quiet(16) == pytest.approx(BASE[16], rel=0.08)  # the price at the timing depth
    at[0] = 1400
    assert c(16) == pytest.approx(_true(16, 1400), rel=0.08)  # and at the context's length now
    at[0] = DEPTH
    assert c(16) == pytest.approx(BASE[16], rel=0.08)
    assert c(32) > c(16) and c(1) == pytest.approx(BASE[1])


def test_a_slope_read_over_fewer_positions_does_not_replace_a_better_one():
    """Two runs on one machine read 5.7 µs over 1,000 positions apart and 2.7 over 746:
    the narrower one is the noisier, so the saved slope stays until as much evidence says
    otherwise (its support halves at each load, so a changed machine is re-learned)."""
    c = _curve()
    c.where = lambda: DEPTH
    for pos in (200, 1400):
        for _ in range(3):
            c.observe(8, _true(8, pos), pos)
    assert c.k == pytest.approx(K) and c.k_support == 8 * 1200
    later = CostCurve.from_json(c.to_json())
    later.where = c.where  # not saved: the context's, set where the curve is hooked up
    assert later.k == pytest.approx(K) and later.k_support == 8 * 600
    for pos in (300, 820):  # a narrower reading, half the slope
        for _ in range(3):
            later.observe(8, BASE[8] + K / 2 * 8 * (pos - DEPTH), pos)
    assert later.k == pytest.approx(K)  # 8 x 520 < 8 x 600: kept (300 is too near the timed 64)
    for pos in (100, 1900):  # a wider one wins
        for _ in range(3):
            later.observe(8, BASE[8] + K / 2 * 8 * (pos - DEPTH), pos)
    assert later.k == pytest.approx(K / 2) and later.k_support == 8 * 1800


def test_k_is_saved_and_an_older_file_reads_as_none_learned():
    c = _curve()
    c.k, c.k_support = 4e-6, 1000.0
    d = c.to_json()
    assert CostCurve.from_json(d).k == 4e-6
    del d["k"], d["k_support"]
    assert CostCurve.from_json(d).k == 0.0
    c.where = lambda: 2000
    assert c(8) == pytest.approx(BASE[8] + 4e-6 * 8 * (2000 - DEPTH))


def test_a_context_reports_where_each_decode_ran(smollm2_path):
    ctx = Context(model(smollm2_path), n_ctx=256, n_batch=64, n_seq_max=2, threads=1)
    seen = []
    ctx.on_decode = lambda n, s, pos: seen.append((n, pos))
    ctx.batch.clear().add_sequence(list(range(10, 30)), 0, 0, logits_last=False)
    ctx.decode()  # a prompt chunk (one row's logits): not a timing, but the length moves
    assert ctx.span == 20 and seen == []
    b = ctx.batch.clear()
    for j in range(4):
        b.add(40 + j, 20 + j, 0, True)
    ctx.decode()
    assert ctx.span == 24 and seen == [(4, 20)]


def test_costs_show_says_what_the_context_adds(tmp_path, monkeypatch, capsys):
    import argparse
    import json

    from localspec.cli.costs import cmd_show

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    (tmp_path / "costs").mkdir()
    c = _curve()
    c.k = 5e-6
    (tmp_path / "costs" / "target-1-t=2-v3.json").write_text(json.dumps(c.to_json()))
    assert cmd_show(argparse.Namespace()) == 0
    out = capsys.readouterr().out
    assert "after 64 of context" in out and "16:267.0" in out  # the depth's prices
    assert "+ 5.0 µs per row per context token past 64 (16 rows at 2048: +159 ms)" in out


def test_a_size_seen_at_one_length_only_reads_its_slope_against_its_timed_price():
    """Auto bets the sizes its curve prices best: on long prompts alone a size seldom had two
    settled bands, and k was never read (a second run kept 2.7 µs where the first had read
    5.7). The curve's timed price at the timing depth is the low end then, for the sizes
    whose cost is smooth in n (a 15-row price between two tiles is not)."""
    fit = SpanFit()
    for _ in range(3):
        fit.add(16, _true(16, 1900), 1900)
        fit.add(15, _true(16, 1900) + 0.06, 1900)  # row by row past the tile
    assert fit.slope() is None
    k, support = fit.slope({n: BASE[n] for n in (8, 16, 32)}, DEPTH)
    assert k == pytest.approx(K) and support == 16 * (1900 - DEPTH)
    c = _curve()
    for _ in range(3):
        c.observe(16, _true(16, 1900), 1900)
    assert c.k == pytest.approx(K)


def test_the_timed_prices_anchor_no_slope_while_the_machine_runs_at_another_level():
    """On a machine 22 % slower than when the curve was timed, the timing read 7.7 µs for ~5:
    it anchors a slope only while the curve's level is within 10 % of it."""
    c = _curve()
    c.scale = 1.22
    for _ in range(3):
        c.observe(16, _true(16, 1900) * 1.22, 1900)
    assert c.k == 0.0


def test_the_slope_is_re_read_only_when_a_band_settles_or_its_minimum_falls():
    fit = SpanFit()
    assert [fit.add(4, t, 300) for t in (0.10, 0.11, 0.12)] == [False, False, True]  # settled
    assert fit.add(4, 0.12, 310) is False  # nothing new: the decode pays no re-read
    assert fit.add(4, 0.09, 320) is True  # a lower minimum


def test_a_recurrent_state_is_priced_and_healed_at_no_place():
    """A recurrent state's step costs the same at any length: the cost model asks no place
    for it (costmodel.length_of), and its curve's live timings heal as they are."""
    from types import SimpleNamespace

    from localspec.backend.memory import Memory
    from localspec.costmodel import length_of

    assert length_of(SimpleNamespace(memory=Memory.RECURRENT, span=2000)) is None
    assert length_of(SimpleNamespace(memory=Memory.HYBRID, span=2000))() == 2000  # its attention layers
    c = CostCurve(sorted(BASE), [BASE[n] for n in sorted(BASE)], where=None)
    for pos in (100, 1900):
        for _ in range(3):
            c.observe(16, BASE[16] * 0.9, pos)  # the same price far in: nothing to fit or remove
    assert c.k == 0.0 and c.fit.bands == {} and c.quiet(16) == pytest.approx(BASE[16] * 0.9)
