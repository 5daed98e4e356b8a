"""`localspec bench paired`: each side's flags over the common ones, one-line errors naming
the side, the A B B A order and its ratio, and one tiny end-to-end run on SmolLM2."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from localspec.bench import paired
from localspec.bench.paired import PromptResult, make_side, order, summary
from localspec.errors import ConfigError


def _args(**kw) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    paired.add_args(p)
    a = p.parse_args(["--a=", "--b="])
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def test_a_sides_flags_override_the_common_ones_and_keep_the_rest() -> None:
    a = _args(n_predict=64, temp=0.0, threads=2)
    s = make_side("B", "--method sd -L 4 -n 32", a, "t.gguf", "d.gguf")
    assert (s.asked.cfg.method, s.asked.cfg.L, s.asked.cfg.auto_L) == ("sd", 4, False)
    assert s.asked.cfg.n_predict == 32  # the side's own -n wins over the bench's
    assert (s.target, s.draft, s.options.threads) == ("t.gguf", "d.gguf", 2)
    base = make_side("A", "", a, "t.gguf", "d.gguf")
    assert (base.asked.cfg.method, base.asked.cfg.n_predict, base.asked.cfg.auto_L) == ("auto", 64, True)
    assert base.asked.cfg.sampling.temp == 0.0


def test_sides_share_a_session_only_when_their_models_and_options_agree() -> None:
    a = _args()
    same = make_side("A", "-L 4", a, "t.gguf", "d.gguf"), make_side("B", "--draft-hint --spec-ngram-max 6", a, "t.gguf", "d.gguf")
    assert same[0].key == same[1].key  # generation flags alone: one loaded session
    other = make_side("B", "-md other.gguf", a, "t.gguf", "d.gguf")
    assert other.key != same[0].key and other.draft == "other.gguf"
    none = make_side("B", "-md ''", a, "t.gguf", "d.gguf")
    assert none.draft is None and none.key != same[0].key
    assert make_side("B", "--ctx 2048", a, "t.gguf", "d.gguf").key != same[0].key


@pytest.mark.parametrize(("flags", "said"), [
    ("-L x", "invalid int value"),
    ("--bogus", "unrecognized arguments: --bogus"),
    ("-L 0", "-L/--draft-len must be >= 1"),
    ("'", "No closing quotation"),
])  # fmt: skip
def test_a_bad_side_is_one_error_that_names_the_side(flags: str, said: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_side("B", flags, _args(), "t.gguf", None)
    msg = str(e.value)
    assert msg.startswith(f"--b {flags!r}: ") and said in msg and "\n" not in msg


def test_the_cli_exits_2_with_one_line_for_a_bad_side(capsys: pytest.CaptureFixture[str]) -> None:
    from localspec.cli.main import main

    rc = main(["bench", "paired", "--a=--method nope", "--b=", "--kinds", "code", "--limit", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--a '--method nope'" in err[0]


def test_the_ratio_is_bs_summed_speed_over_as_and_the_first_run_alternates() -> None:
    runs = ["".join(paired.SIDES[i] for i in order(n)) for n in range(4)]
    assert runs == ["ABBA", "BAAB", "ABBA", "BAAB"]  # each side twice a prompt, first on every other
    r = PromptResult("p", {"A": [10.0, 14.0], "B": [12.0, 12.0]})
    assert r.ratio == pytest.approx(1.0)
    rs = [r, PromptResult("q", {"A": [10.0, 10.0], "B": [11.0, 11.0]}, same_text=False),
          PromptResult("s", {"A": [10.0, 10.0], "B": [9.0, 9.0]})]
    s = summary(rs)
    assert s["median"] == pytest.approx(1.0) and s["min"] == pytest.approx(0.9) and s["max"] == pytest.approx(1.1)
    assert (s["prompts"], s["b_faster"], s["same_text"]) == (3, 1, 2)
    assert summary([]) == {"prompts": 0}
    silent = PromptResult("z", {"A": [0.0, 0.0], "B": [5.0, 5.0]})  # A wrote nothing: no ratio, no crash
    assert math.isnan(silent.ratio) and summary([*rs, silent])["prompts"] == 3
    assert summary([*rs, silent])["same_text"] == 2


def test_paired_runs_on_smollm2(tmp_path: Path, smollm2_path: Path, smollm2_q4_0_path: Path,
                                capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """AR against auto with a draft, greedy: four runs a prompt, the ratio from them, the
    same text on both sides (auto is lossless), two sessions (the sides' drafts differ)."""
    import localspec.loading as loading
    from localspec.cli.main import main

    opened: list[tuple] = []
    real = loading.open_session
    monkeypatch.setattr(loading, "open_session", lambda t, d, o: opened.append((t, d)) or real(t, d, o))
    out = tmp_path / "p.json"
    rc = main(["bench", "paired", "-m", str(smollm2_path), "--a=--method ar", f"--b=-md {smollm2_q4_0_path}",
               "--kinds", "code", "--limit", "2", "-n", "8", "-t", "1", "--out", str(out)])  # fmt: skip
    assert rc == 0
    data = json.loads(out.read_text())
    assert [p["id"] for p in data["prompts"]] == ["code-he2", "code-he7"]
    for p in data["prompts"]:
        a, b = p["tok_per_s"]["A"], p["tok_per_s"]["B"]
        assert len(a) == len(b) == 2 and min(a + b) > 0
        assert p["ratio"] == pytest.approx(sum(b) / sum(a))
        assert p["same_text"] is True  # greedy AR and greedy auto write the same answer
    assert data["summary"]["prompts"] == 2 and data["summary"]["same_text"] == 2
    assert data["sides"]["B"]["draft"] == str(smollm2_q4_0_path) and data["sides"]["A"]["draft"] is None
    assert data["order"] == ["ABBA", "BAAB"]
    assert opened == [(str(smollm2_path), None), (str(smollm2_path), str(smollm2_q4_0_path))]
    printed = capsys.readouterr().out
    assert "| code-he2 |" in printed and "B/A per prompt: median" in printed


def test_a_structured_prompt_is_answered_under_its_schema_unless_the_side_gave_one() -> None:
    from localspec.bench.common import Prompt

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    free, structured = Prompt("chat", "c", "hi"), Prompt("structured", "s", "give a", schema=schema)
    cfg = make_side("A", "", _args(), "t.gguf", None).asked.cfg
    assert paired.for_prompt(cfg, free) is cfg
    got = paired.for_prompt(cfg, structured).constraint
    assert got is not None and got.kind == "json_schema" and json.loads(got.text) == schema
    own = make_side("B", "-j '{\"type\": \"string\"}'", _args(), "t.gguf", None).asked.cfg
    assert paired.for_prompt(own, structured).constraint.text == own.constraint.text  # the side's own wins


@pytest.mark.parametrize("argv", [["bench", "--help"], ["bench", "paired", "--help"]])
def test_the_help_prints(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """argparse %-formats every help string: a bare "3 %" in one made `bench --help` crash."""
    from localspec.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0 and "paired" in capsys.readouterr().out
