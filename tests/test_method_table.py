"""One method table (config.METHOD_TABLE) and everything that reads it agrees with it."""

from __future__ import annotations

import pytest

from localspec import verify
from localspec.config import METHOD_TABLE, METHODS, SPECULATIVE, GenConfig, SamplingConfig
from localspec.errors import ConfigError


def test_the_verifiers_are_the_speculative_methods():
    assert set(SPECULATIVE) == set(verify.VERIFIERS)
    assert all(METHOD_TABLE[m].needs_draft for m in SPECULATIVE)


def test_the_cli_offers_exactly_the_table():
    from localspec.cli.main import build_parser

    p = build_parser()
    run = p._subparsers._group_actions[0].choices["run"]
    (method,) = [a for a in run._actions if a.dest == "method"]
    assert tuple(method.choices) == METHODS


def test_the_bench_tables_run_every_verifier_of_the_papers():
    """bench tables reproduces the papers' tables; rrs (ours, for stacked proposers) is
    measured by bench speed instead."""
    from localspec.bench import tables

    assert set(tables.METHODS) == set(SPECULATIVE) - {"rrs"}


@pytest.mark.parametrize("name", METHODS)
def test_the_K_rule_comes_from_the_table(name):
    need = METHOD_TABLE[name].min_K
    if need > 1:
        with pytest.raises(ConfigError, match=f"-K >= {need}"):
            GenConfig(method=name, K=need - 1).validate()
    GenConfig(method=name, K=need).validate()


def test_lossless_claims_match_the_readme_table():
    """README's method table says which methods are lossless; it must say what the table does."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for m in METHOD_TABLE.values():
        rows = [ln for ln in readme.splitlines() if ln.startswith(f"| `{m.name}`")]
        assert rows, m.name
        says_no = "| **no**" in rows[0] or "| no" in rows[0]
        assert says_no == (not m.lossless), (m.name, rows[0])


def test_greedy_is_temperature_zero():
    assert SamplingConfig(temp=0.0).greedy and not SamplingConfig(temp=0.2).greedy
