"""The split prompt sets a policy is judged on (issue 40): big enough, halved for good, and
selected by `bench speed --kinds K --half H`; the edit and code sets come from HumanEval
0-99 only (100-163 are reserved), the tune half from 0-39 and the report half from 40-99."""

from __future__ import annotations

import argparse
import re
from collections import Counter

import pytest

from localspec.bench.common import HALVES, SPLIT_FILES, load_prompts, read_jsonl
from localspec.bench.speed import add_args

KINDS = ("edit", "code", "chat")


@pytest.mark.parametrize("kind", KINDS)
def test_each_set_is_large_and_evenly_halved(kind: str) -> None:
    rows = read_jsonl(SPLIT_FILES[kind])
    assert len(rows) >= 30 and {r["kind"] for r in rows} == {kind}
    assert len({r["id"] for r in rows}) == len(rows)
    halves = Counter(r["half"] for r in rows)
    assert set(halves) == set(HALVES) and halves["tune"] == halves["report"]
    assert len({r["prompt"] for r in rows}) == len(rows)


@pytest.mark.parametrize("kind", ["edit", "code"])
def test_humaneval_sources_respect_the_split_and_the_reserve(kind: str) -> None:
    for r in read_jsonl(SPLIT_FILES[kind]):
        i = int(re.fullmatch(r"HumanEval/(\d+)", r["source"]).group(1))
        assert i < 100, r["id"]  # 100-163: the final held-out evaluation's
        assert (i < 40) == (r["half"] == "tune"), r["id"]


def test_edit_prompts_requote_the_code_and_mix_the_same_changes_in_each_half() -> None:
    rows = read_jsonl(SPLIT_FILES["edit"])
    for r in rows:
        ask, _, code = r["prompt"].partition("\n\n")
        assert "def " in code and ask.endswith(":"), r["id"]
    firsts = {h: Counter(r["prompt"].split(" ", 2)[0] for r in rows if r["half"] == h) for h in HALVES}
    assert firsts["tune"] == firsts["report"]


def test_bench_speed_selects_a_kind_and_half() -> None:
    """What `bench speed --kinds edit --half tune` parses to loads that half of that set
    alone; without --half the short speed set stays the default."""
    p = argparse.ArgumentParser()
    add_args(p)
    a = p.parse_args(["--kinds", "edit", "--half", "tune"])
    got = load_prompts(a.prompts, a.kinds, a.limit, a.half)
    want = [r["id"] for r in read_jsonl("split-edit") if r["half"] == "tune"]
    assert [q.id for q in got] == want and {q.dataset for q in got} == {"edit"} and {q.half for q in got} == {"tune"}
    a = p.parse_args(["--kinds", "chat", "code", "--half", "report", "--limit", "3"])
    assert [q.id for q in load_prompts(a.prompts, a.kinds, a.limit, a.half)] == \
        [r["id"] for r in read_jsonl("split-code") + read_jsonl("split-chat") if r["half"] == "report"][:3]
    every = load_prompts(None, half="report")
    assert {q.dataset for q in every} == {"edit", "code", "chat", "structured"}
    assert not any(q.id.startswith(("edit-he", "code-he")) for q in load_prompts(None, ["edit", "code"]))


def test_the_long_edits_are_read_only_when_named_and_keep_the_reserve() -> None:
    """The edit set's requests on long files (scripts/make_long_edits.py): the first 8 edits
    of each half, each followed by eleven other HumanEval 0-99 problems."""
    rows = read_jsonl("split-long-edit")
    edits = {r["id"]: r for r in read_jsonl(SPLIT_FILES["edit"])}
    assert Counter(r["half"] for r in rows) == {"tune": 8, "report": 8}
    for r in rows:
        base = edits[r["id"].removeprefix("long-")]
        assert r["half"] == base["half"] and r["prompt"].startswith(base["prompt"].rstrip("\n"))
        assert all(int(o.split("/")[1]) < 100 for o in r["others"]) and len(r["prompt"]) > 4 * len(base["prompt"])
    got = load_prompts(None, ["long-edit"], half="report")
    assert [q.id for q in got] == [r["id"] for r in rows if r["half"] == "report"]
    assert not any(q.dataset == "long-edit" for q in load_prompts(None, half="report"))
