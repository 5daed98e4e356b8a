"""llama.cpp's loop timed over the tokens localspec's figure covers (bench/peer_timeline.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localspec.bench import peer
from localspec.bench.peer_timeline import LOG_ARGS, speed_at, timeline

# the shape of a real `-lv 5` run (ngram-mod on a long edit, -n 128: 193 tokens made)
LOG = """0.28.341.633 I spec        begin: ngram_mod occupancy = 2235/4194304 (0.00)
0.28.396.384 D accepted 0/0 draft tokens, the last target token is: (73594)
0.28.396.404 D clear kv cache from any extra tokens, n_past = 2269
""" + "".join(f"0.29.{500 + 50 * i:03d}.000 D accepted 0/0 draft tokens, the last target token is: (1)\n"
              for i in range(9)) + """0.31.254.792 D accepted 64/64 draft tokens, the last target token is: (262)
0.32.191.580 D accepted 35/35 draft tokens, the last target token is: (481)
0.33.649.614 D accepted 64/64 draft tokens, the last target token is: (326)
0.33.649.687 I decoded  176 tokens in    5.308 seconds, speed:   33.158 t/s
"""


def test_the_timeline_counts_each_pass_from_the_loops_start():
    points = timeline(LOG, 5.308)
    assert [n for n, _ in points][-4:] == [10, 75, 111, 176]  # accepted + 1 per pass
    assert points[0][1] == pytest.approx(28.396384 - (33.649614 - 5.308), abs=1e-6)
    assert points[-1][1] == pytest.approx(5.308, abs=1e-6)


def test_the_speed_at_n_is_read_at_the_pass_that_reaches_it():
    points = timeline(LOG, 5.308)
    start = 33.649614 - 5.308  # the last pass's time less the loop's length
    assert speed_at(points, 111) == (111, pytest.approx(32.191580 - start, abs=1e-6))
    assert speed_at(points, 100) == (100, pytest.approx(32.191580 - start, abs=1e-6))  # paid whole
    assert speed_at(points, 177) is None  # never reached: the tool's own figure stands
    assert timeline("decoded  12 tokens in 1.0 seconds", 1.0) == []  # no per-pass lines


def test_a_result_reports_its_first_n_tokens_not_its_overshoot():
    r = peer.PeerResult(tok_per_s=33.158, n_drafted=163, n_accepted=163, n_predict=176, seconds=5.308, raw_cmd=[],
                        stdout_tail="", timeline=timeline(LOG, 5.308))
    tok_per_s, n, seconds = r.at(100)
    assert n == 100 and seconds == pytest.approx(3.8499, abs=1e-3) and tok_per_s == pytest.approx(100 / 3.8499, rel=1e-3)
    assert r.at(500) == (33.158, 176, 5.308)
    assert r.at(100)[0] < r.tok_per_s  # the 64-token pass past 100 was the fastest


def test_the_command_asks_for_the_per_pass_lines():
    cmd = peer.build_speculative_cmd("x", Path("t.gguf"), Path("d.gguf"), "p", n_predict=8, threads=2,
                                     draft_max=16, draft_min=0, p_min=0.0, spec_type="ngram-mod")
    i = cmd.index(LOG_ARGS[0])
    assert tuple(cmd[i:i + len(LOG_ARGS)]) == LOG_ARGS


@pytest.mark.skipif(peer.peer_binaries() is None, reason="llama.cpp peer binaries not built")
def test_real_ngram_mod_overshoots_and_the_bench_reads_its_first_n(smollm2_path: Path) -> None:
    """ngram-mod drafts its own 48-64 tokens: asked for 24 on a repeating prompt it makes more,
    and the figure the bench keeps covers the first 24."""
    threads = min(2, os.cpu_count() or 1)
    text = "one two three four five six seven eight nine ten " * 12
    r = peer.run_speculative_simple(smollm2_path, smollm2_path, text, 24, threads, 16, 0, 0.0, spec_type="ngram-mod")
    assert r.timeline and r.timeline[-1][0] == r.n_predict
    assert r.n_predict > 24  # the pass that crossed 24 went past it
    tok_per_s, n, seconds = r.at(24)
    assert n == 24 and 0 < seconds <= r.seconds
