"""PARSE segmenter, t* rule, judge statistics and bench guards: pure functions, no model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from localspec.bench import humaneval as he
from localspec.bench.parse.scores import auroc
from localspec.bench.parse.summary import judge_auroc_table, plot_tradeoff, summary_rows
from localspec.decode.parse.judges import VerdictTokens, prefix_evidence, segment_stat
from localspec.decode.parse.segment import (
    BLANK_LINE,
    LINE_END,
    SENTENCE_END,
    boundaries,
    boundary_kinds,
    choose_cuts,
    decide,
    t_star,
)
from localspec.errors import ConfigError

CODE = ["def", " f", "(x", "):\n", "   ", " y", " =", " x", ".append", "(", "1", ")\n", "\n",
        "   ", " return", " y", "\n"]


def test_boundary_kinds_code_stream() -> None:
    kinds = boundary_kinds(CODE)
    assert kinds[3] == LINE_END and kinds[11] == LINE_END
    assert kinds[12] == BLANK_LINE  # a newline right after a line end: a blank line
    assert kinds[8] == 0  # ".append" is not a sentence end
    assert boundaries(CODE) == [4, 12, 13, 17]


def test_boundary_kinds_prose() -> None:
    pieces = ["The", " list", " is", " sorted", ".", " Then", " we", " scan", " it", "!\n\n", "Done", "."]
    kinds = boundary_kinds(pieces)
    assert kinds[4] == SENTENCE_END  # followed by " Then"
    assert kinds[9] == BLANK_LINE
    assert kinds[11] == 0  # last token: no following whitespace seen
    assert boundary_kinds([b"x = 1.", b"5\n"]) == [0, LINE_END]  # a decimal point is no sentence end


def test_choose_cuts_no_boundaries_gives_whole_answer() -> None:
    assert choose_cuts([], 37, 8, 4) == [37]
    assert choose_cuts([], 0, 8, 4) == []


def test_choose_cuts_more_cuts_than_boundaries() -> None:
    # every boundary kept (>= min_seg apart, >= min_seg from the end) + the whole answer
    assert choose_cuts([10, 20, 30], 40, 16, 5) == [10, 20, 30, 40]


def test_choose_cuts_min_seg_and_end() -> None:
    # 12 is 2 after 10; 38 is 2 before the end; both dropped
    assert choose_cuts([10, 12, 25, 38], 40, 16, 5) == [10, 25, 40]
    assert choose_cuts([3, 10], 40, 16, 5) == [10, 40]  # 3 is too close to the start


def test_choose_cuts_spread_and_limit() -> None:
    bounds = list(range(5, 100, 5))
    cuts = choose_cuts(bounds, 100, 4, 5)
    assert cuts == [25, 50, 75, 100]
    cuts = choose_cuts(bounds, 100, 1, 5)
    assert cuts == [100]
    many = choose_cuts(list(range(1, 300)), 300, 8, 8)
    assert len(many) == 8 and many[-1] == 300
    assert all(b - a >= 8 for a, b in zip([0, *many], many, strict=False))


def test_decide_monotone_and_not() -> None:
    thr = 0.5
    assert decide([0.9, 0.8, 0.7], thr) == 2  # all valid
    assert decide([0.9, 0.4, 0.3], thr) == 0  # monotone failure after the first cut
    assert decide([0.9, 0.4, 0.8, 0.3], thr) == 0  # non-monotone: the later 0.8 does not count
    assert decide([0.3, 0.9, 0.2], thr) == -1  # first prefix already invalid
    assert decide([0.3, 0.4, 0.9], thr) == 2  # whole answer valid: accepted outright (paper)
    assert decide([], thr) == -1
    cuts = [10, 20, 30, 40]
    assert t_star(cuts, [0.9, 0.9, 0.1, 0.2], thr) == 20
    assert t_star(cuts, [0.1, 0.9, 0.9, 0.2], thr) == 0
    assert t_star(cuts, [0.1, 0.1, 0.1, 0.6], thr) == 40


def test_segment_statistics() -> None:
    gaps = np.array([0.0, 3.0, 0.5, 0.0, 5.0, 0.0])
    assert segment_stat(gaps, 2.0) == pytest.approx(1.0 + 3.0)
    assert segment_stat(np.zeros(0), 2.0) == 0.0
    assert segment_stat(gaps, 2.0, "max") == 5.0
    ev = prefix_evidence(gaps, [2, 4, 6], 2.0)
    assert ev == [1.0, 1.0, 3.0]  # max over segments: non-decreasing
    assert all(b >= a for a, b in zip(ev, ev[1:], strict=False))


def test_verdict_share() -> None:
    v = VerdictTokens(np.array([1, 2, 3]), n_ok=2)
    s = v.score(np.array([0.0, 0.0, math.log(2.0)]))
    assert s == pytest.approx(0.5)


def test_auroc() -> None:
    assert auroc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert auroc([0.1, 0.8, 0.9], [True, True, False]) == 0.0
    assert auroc([0.5, 0.5], [True, False]) == 0.5


def test_judge_auroc_table_reads_whole_draft_scores(capsys: pytest.CaptureFixture[str]) -> None:
    def rec(i: int, score: float, full: bool = True) -> dict:
        cuts = [5, 10] if full else [5, 8]
        return {"index": i, "method": "parse:x", "pass": True,
                "parse": {"rounds": [{"cuts": cuts, "scores": [0.0, score], "draft_tokens": 10}]}}

    by = {
        "draft": [{"index": i, "pass": ok} for i, ok in enumerate([True, True, False, False])],
        # problem 3's last cut is not the whole draft: it must be left out (else AUROC < 1)
        "parse:x": [rec(0, 0.9), rec(1, 0.7), rec(2, 0.2), rec(3, 0.95, full=False)],
    }
    judge_auroc_table(by, {0, 1, 2, 3})
    out = capsys.readouterr().out
    assert "| parse:x | 1.000 | 2 | 1 |" in out


def test_summary_rows_use_problems_every_method_finished(tmp_path) -> None:
    recs = [
        {"index": 0, "method": "ar", "pass": True, "seconds": 10.0, "n_tokens": 100},
        {"index": 1, "method": "ar", "pass": False, "seconds": 10.0, "n_tokens": 100},
        {"index": 0, "method": "parse:x", "pass": True, "seconds": 4.0, "n_tokens": 100,
         "parse": {"rounds": [{"draft_tokens": 100, "accepted_tokens": 80}]}},
        {"index": 1, "method": "parse:x", "pass": True, "seconds": 6.0, "n_tokens": 100,
         "parse": {"rounds": [{"draft_tokens": 100, "accepted_tokens": 20}]}},
        {"index": 2, "method": "ar", "pass": True, "seconds": 99.0, "n_tokens": 100},  # parse:x missing
    ]
    common, rows = summary_rows(recs, range(3))
    assert common == {0, 1}
    r = {x["method"]: x for x in rows}
    assert r["ar"]["pass_at_1"] == 0.5 and r["parse:x"]["pass_at_1"] == 1.0
    assert r["parse:x"]["speedup"] == pytest.approx(2.0)  # 20 s of AR / 10 s
    assert r["parse:x"]["accepted_share"] == pytest.approx(0.5)
    png = plot_tradeoff(rows, tmp_path / "t.png", "t")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


def test_humaneval_reserved_split_refused() -> None:
    with pytest.raises(ConfigError, match="reserved"):
        he.problems([99, 100])
    with pytest.raises(ConfigError, match="reserved"):
        he.check_allowed(he.parse_range("150-163"))
    assert he.parse_range("0-3,7") == [0, 1, 2, 3, 7]


def test_humaneval_grading_in_subprocess() -> None:
    p = he.problems([0])[0]
    good = (
        "def has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
    )
    bad = "def has_close_elements(numbers, threshold):\n    return False\n"
    body_only = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
    assert he.passes(p, good)
    assert not he.passes(p, bad)
    assert he.passes(p, body_only)  # the prompt (signature) is put in front of a bare body
    assert not he.passes(p, "def has_close_elements(numbers, threshold):\n    while True: pass\n", timeout=1.0)


def test_perfect_judge_bound_from_measured_times() -> None:
    """The bound keeps drafts that pass (or whose target answer fails too), rewrites the
    rest at the given speed, and trades accuracy for time only within the slack."""
    from localspec.bench.parse.summary import perfect_judge_bound

    def rec(i: int, m: str, ok: bool, secs: float, judge: float | None = None) -> dict:
        r = {"index": i, "method": m, "pass": ok, "seconds": secs}
        if judge is not None:
            r["parse"] = {"rounds": [{"judge_seconds": judge}]}
        return r

    by = {
        "ar": [rec(0, "ar", True, 10), rec(1, "ar", True, 10), rec(2, "ar", False, 10)],
        "draft": [rec(0, "draft", True, 1), rec(1, "draft", False, 1), rec(2, "draft", False, 1)],
        "parse:likelihood": [rec(i, "parse:likelihood", True, 3, judge=1.0) for i in range(3)],
        "parse:prompt": [rec(i, "parse:prompt", True, 3, judge=2.0) for i in range(3)],  # dearer judge
    }
    p, s = perfect_judge_bound(by, {0, 1, 2}, regen_speedup=2.0)
    assert p == pytest.approx(2 / 3) and s == pytest.approx(30 / 11)  # 2 + (2 + 5) + 2 seconds
    p, s = perfect_judge_bound(by, {0, 1, 2}, regen_speedup=2.0, slack=0.5)
    assert p == pytest.approx(1 / 3) and s == pytest.approx(30 / 6)  # keeps the failing draft too
    assert perfect_judge_bound({"ar": by["ar"]}, {0, 1, 2}, 2.0) is None
