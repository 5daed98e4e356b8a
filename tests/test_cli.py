"""CLI smoke tests through a subprocess: streaming, --json fields, bad input -> exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localspec.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_run_json_fields(smollm2_path):
    r = cli("run", "-m", str(smollm2_path), "-p", "Say hi.", "-n", "12", "--method", "ar", "--json", "-t", "1")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    for key in ("method", "target", "draft", "text", "n_tokens", "prompt_tokens", "seconds", "tok_per_s",
                "iterations", "target_calls", "block_efficiency", "accepted_lengths", "draft_seconds",
                "verify_seconds", "overhead_seconds", "K", "L", "parse"):
        assert key in d, key
    assert d["method"] == "ar" and 0 < d["n_tokens"] <= 12 and d["text"]
    assert d["text"] in r.stdout  # streamed before the JSON line
    assert d["spans"] == [{"by": "target", "text": d["text"], "tokens": d["n_tokens"]}]  # AR: the target wrote it all


def test_spans_name_who_wrote_each_part():
    """`run --json`'s spans: accepted text under its proposer, written text under its kind,
    one span per run of one author; events that carry no visible text add nothing."""
    from localspec.cli.spans import SpanLog
    from localspec.events import Accepted, Drafted, Rejected, Stats, StatsUpdate, Written

    log = SpanLog()
    events = [Drafted(((1, 2),), ("ab",), "ngram"), Accepted(0, 2, (1, 2), "ab", "ngram"),
              Written((3,), "c", "bonus"), Drafted(((4, 5),), ("de",)), Accepted(0, 1, (4,), "d"),
              Rejected(0, (5,), "e"), Written((6,), "f", "correction"), StatsUpdate(Stats()),
              Accepted(0, 0, (), ""), Drafted(((7,),), ("g",), "suffix"), Accepted(0, 1, (7,), "g", "suffix"),
              Drafted(((8,),), ("h",), "suffix"), Accepted(0, 1, (8,), "h", "suffix")]
    assert list(log.tap(events)) == events  # passed through unchanged
    assert log.spans == [{"by": "ngram", "text": "ab", "tokens": 2}, {"by": "bonus", "text": "c", "tokens": 1},
                         {"by": "draft", "text": "d", "tokens": 1}, {"by": "correction", "text": "f", "tokens": 1},
                         {"by": "suffix", "text": "gh", "tokens": 2}]


def test_run_json_after_ctrl_c(smollm2_path):
    # the first Ctrl-C ends the answer: what was generated so far still gets its JSON line
    cmd = [sys.executable, "-m", "localspec.cli", "run", "-m", str(smollm2_path), "--method", "ar", "--raw",
           "-p", "1, 2, 3, 4, 5,", "-n", "1500", "-c", "2048", "-t", "1", "--json"]
    # unbuffered bytes: communicate() reads the fd itself, so whatever a buffered text reader
    # had read ahead of `seen` would be lost (a rare startswith failure under load)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        seen = b""
        deadline = time.monotonic() + 120
        while len(seen) < 20:  # it is generating
            assert time.monotonic() < deadline and p.poll() is None, p.stderr.read() if p.poll() is not None else ""
            seen += p.stdout.read(1)
        p.send_signal(signal.SIGINT)
        rest, err_b = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    out = (seen + rest).decode("utf-8", "replace")
    err = err_b.decode("utf-8", "replace")
    assert p.returncode == 130, err
    d = json.loads(out.strip().splitlines()[-1])
    assert d["stop_reason"] == "interrupted" and 0 < d["n_tokens"] < 1500
    assert d["text"] and out.startswith(d["text"]) and len(d["text"]) >= 20
    assert "Traceback" not in err and "interrupted" in err


def test_run_plain_prints_stats_line(smollm2_path):
    r = cli("run", "-m", str(smollm2_path), "-p", "Say hi.", "-n", "8", "--method", "ar", "-t", "1")
    assert r.returncode == 0, r.stderr
    assert "tok/s" in r.stderr and r.stdout.strip()


def test_the_stats_line_sets_the_forecast_beside_the_measured_speed():
    """Where auto drafted, the stats line says what its cost model expected of the iterations
    it ran (costmodel/forecast.py); plain decoding has nothing to forecast."""
    from localspec.cli.main import _stats_line
    from localspec.events import Stats

    st = Stats(method="auto", ran="auto: sd K=1 L<=16", n_tokens=64, seconds=2.0, iterations=12, target_calls=12,
               forecast=[60.0, 2.5])
    assert "forecast 24.0 tok/s" in _stats_line(st) and "32.0 tok/s" in _stats_line(st)
    st.ran = "ar"
    assert "forecast" not in _stats_line(st)
    assert "forecast" not in _stats_line(Stats(method="sd", ran="sd K=1 L=4", n_tokens=8, seconds=1.0))


def test_missing_path_exit_2(tmp_path):
    r = cli("run", "-m", str(tmp_path / "nope.gguf"), "-p", "hi")
    assert r.returncode == 2
    assert "nope.gguf" in r.stderr and "Traceback" not in r.stderr


def test_not_gguf_exit_2(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("this is not a model\n" * 100)
    r = cli("run", "-m", str(bad), "-p", "hi")
    assert r.returncode == 2 and "GGUF" in r.stderr and "Traceback" not in r.stderr


def test_truncated_gguf_exit_2(tmp_path, smollm2_path):
    cut = tmp_path / "cut.gguf"
    with open(smollm2_path, "rb") as f:
        cut.write_bytes(f.read(5_000_000))
    r = cli("run", "-m", str(cut), "-p", "hi")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "truncated" in r.stderr.lower() or "size" in r.stderr.lower()


def test_bad_flag_values_exit_2(smollm2_path):
    r = cli("run", "-m", str(smollm2_path), "-p", "hi", "--top-p", "1.5")
    assert r.returncode == 2 and "--top-p" in r.stderr
    r = cli("run", "-m", str(smollm2_path), "-p", "hi", "--method", "sd")
    assert r.returncode == 2 and "draft" in r.stderr


def test_vocab_mismatch_exit_2(tmp_path, smollm2_path, qwen_draft_path):
    r = cli("run", "-m", str(qwen_draft_path), "-md", str(smollm2_path), "-p", "hi", "--method", "sd")
    assert r.returncode == 2 and "vocabulary" in r.stderr and "Traceback" not in r.stderr


test_vocab_mismatch_exit_2 = pytest.mark.slow(test_vocab_mismatch_exit_2)


def test_help_teaches():
    r = cli("run", "--help")
    assert r.returncode == 0 and "--method" in r.stdout and "-md" in r.stdout
    assert "models" in cli("--help").stdout


def test_no_prompt_exit_2(smollm2_path):
    r = cli("run", "-m", str(smollm2_path))
    assert r.returncode == 2 and "--prompt" in r.stderr


def test_prompt_file(tmp_path: Path, smollm2_path):
    f = tmp_path / "p.txt"
    f.write_text("Say hi.")
    r = cli("run", "-m", str(smollm2_path), "-f", str(f), "-n", "4", "--method", "ar", "--json")
    assert r.returncode == 0, r.stderr
