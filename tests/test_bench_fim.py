"""bench fim: the holes (deterministic, the three kinds, halves, the file put back together)
and a tiny end-to-end run against `localspec serve` (slow-marked: a model loads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from localspec.bench.fim import table
from localspec.bench.fim_holes import KINDS, Hole, cut_holes, stdlib_files
from localspec.bench.fim_rhythm import answer_free, table_lines, typed_points


def test_holes_are_deterministic_and_cover_kinds_and_halves() -> None:
    a, b = cut_holes(12, seed=3), cut_holes(12, seed=3)
    assert [h.to_json() for h in a] == [h.to_json() for h in b]
    assert [h.id for h in cut_holes(12, seed=4)] != [h.id for h in a]
    assert [h.kind for h in a] == list(KINDS) * 4
    assert [h.half for h in a] == ["tune", "report"] * 6


def test_a_hole_is_cut_from_its_file_where_the_cursor_is() -> None:
    files = {p.name: p for p in stdlib_files()}
    for h in cut_holes(9, seed=0):
        name, line, _ = h.id.split(":")
        text = files[name].read_text(encoding="utf-8")
        assert h.prefix + h.middle + h.suffix in text  # contiguous, in order
        assert h.prefix.endswith(" " * h.n_indent) and h.middle[:1] not in (" ", "\t", "\n")
        assert text.splitlines()[int(line) - 1].strip().startswith(h.middle.splitlines()[0].strip())
        assert {c["filename"] for c in h.extra} <= set(files) and name not in {c["filename"] for c in h.extra}
        assert h.exact(h.middle + "  \n") and not h.exact(h.middle + "x")


def test_the_table_compares_with_the_best_llama_server() -> None:
    rows = [{"server": "localspec", "skipped": "", "holes": 2, "latency_p50_ms": 70.0, "latency_p95_ms": 90.0,
             "tok_per_s": 50.0, "exact": 0.5, "free_p50_ms": 80.0},
            {"server": "llama-server:none", "skipped": "", "holes": 2, "latency_p50_ms": 140.0,
             "latency_p95_ms": 150.0, "tok_per_s": 20.0, "exact": 0.5, "free_p50_ms": 120.0},
            {"server": "llama-server:ngram-simple", "skipped": "", "holes": 2, "latency_p50_ms": 100.0,
             "latency_p95_ms": 150.0, "tok_per_s": 30.0, "exact": 0.5, "free_p50_ms": 90.0},
            {"server": "llama-server:draft-simple", "skipped": "not built"}]
    lines = table(rows).splitlines()
    assert lines[1].split()[-3] == "0.70x" and lines[3].split()[-3] == "1.00x"
    # the bound: the p50 with the answers free, against the best server's real p50
    assert lines[1].split()[-2:] == ["80ms", "0.80x"] and lines[3].split()[-1] == "0.90x"
    assert "skipped: not built" in lines[4]


def test_typed_points_are_word_ends_short_of_the_whole_middle() -> None:
    middle = "return os.path.join(a, b)\n"
    assert typed_points(middle, 3) == [7, 23]  # after "return ", after "os.path.join(a, "; the last word is the end
    assert typed_points(middle, 1) == [7]
    assert typed_points("pass\n", 3) == []  # one word: nothing left to ask for once it is typed


def test_answer_free_takes_each_answers_decoding_out() -> None:
    got = answer_free([{"latency": 3.0, "predicted_ms": 1200.0}, {"latency": 0.5, "predicted_ms": 900.0},
                       {"latency": 2.0}])
    assert got == pytest.approx([1.8, 0.0, 2.0])  # never below nothing; a server without timings: its latency


def test_rhythm_table_compares_warm_latency_with_the_best_llama_server() -> None:
    def row(server: str, p50: float) -> dict:
        return {"server": server, "skipped": "", "rhythm": {"requests": 4, "words": 3, "warm_p50_ms": p50,
                                                           "warm_p95_ms": p50 * 2, "exact": 0.5, "prompt_share": 0.7,
                                                           "cold_p50_ms": 9000.0, "free_p50_ms": p50 * 0.6}}
    lines = table_lines([row("localspec", 1500.0), row("llama-server:none", 3000.0), row("llama-server:ngram-simple", 2000.0)])
    assert "3 typed words" in lines[1]
    assert lines[3].split()[0] == "localspec" and lines[3].split()[-3] == "0.75x"
    assert lines[3].split()[-2:] == ["900ms", "0.45x"]  # 0.6 x 1500 ms against the best's 2000 ms
    assert lines[5].split()[-3] == "1.00x"
    assert table_lines([{"server": "localspec", "skipped": "", "rhythm": None}]) == []


@pytest.mark.slow
def test_bench_fim_smoke(qwen_draft_path: Path, tmp_path: Path) -> None:
    """Two holes and one typed keystroke on Qwen2.5-Coder-0.5B alone (prompt lookups), no peer."""
    out = tmp_path / "fim.json"
    r = subprocess.run([sys.executable, "-m", "localspec.cli", "bench", "fim", "-m", str(qwen_draft_path), "-md", "",
                        "--method", "sd", "--localspec-args", "--spec-type ngram -L 8",
                        "--servers", "localspec,localspec:ar+no-prefetch", "--holes", "2", "--half", "all", "-n", "8", "-c", "2048",
                        "--typing", "1", "--keys", "1", "--rhythm", "2", "--words", "1",
                        "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    row, ar = data["rows"]
    # the rhythm: one warm request per hole with a word to type, asked of both servers
    want = sum(1 for h in data["holes"] if typed_points(Hole(**{**h, "extra": tuple(h["extra"])}).middle, 1))
    for x in (row, ar):
        assert x["rhythm"]["requests"] == want and len(x["rhythm"]["cold"]) == want
        assert all(s["typed"] > 0 and s["latency"] > 0 for s in x["rhythm"]["warm"])
    assert ar["typing"]["keystrokes"] == 2 and ar["server"] == "localspec:ar+no-prefetch"
    assert "--no-prefetch" in ar["command"] and "--no-prefetch" not in row["command"]
    assert row["rhythm"]["pause_ms_per_char"] == 150.0
    assert row["server"] == "localspec" and not row["skipped"] and row["holes"] == 2
    assert all(0 < s["tokens"] <= 8 and s["latency"] > 0 for s in row["samples"])
    # the bound: the server's decoding time is recorded and taken out of the latency
    assert all(0 < s["predicted_ms"] < s["latency"] * 1e3 for s in row["samples"])
    assert 0 < row["free_p50_ms"] < row["latency_p50_ms"] and 0 < row["rhythm"]["free_p50_ms"] < row["rhythm"]["warm_p50_ms"]
    assert row["typing"]["keystrokes"] == 2 and row["typing"]["superseded_tokens_mean"] < 8
    assert "localspec" in r.stdout and "typing (localspec)" in r.stdout
