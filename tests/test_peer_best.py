"""bench/peer_best.py: the llama.cpp column a bench's ratios are taken to."""

from __future__ import annotations

import pytest

from localspec.bench.peer_best import best_peer, drafted
from localspec.bench.runner import PEER, Run, Spec
from localspec.errors import ConfigError

TYPES = ("none", "ngram-simple", "ngram-mod", "ngram-map-k")
SPECS = [Spec(PEER, 1, 16, 0.0, proposers=t) for t in TYPES]


def runs(speeds: dict[str, list[float]], drafts: dict[str, int]) -> list[Run]:
    out = []
    for s in SPECS:
        for i, v in enumerate(speeds.get(s.proposers, [])):
            out.append(Run("chat", f"p{i}", PEER, 1, 16, 0.0, v, label=s.label,
                           extra={"drafted": drafts.get(s.proposers, 0) if i == 0 else 0}))
    return out


def test_a_column_that_drafted_nothing_is_the_plain_loop() -> None:
    """The chat case of stop 56: ngram-mod drafted nothing and was fastest by noise."""
    rs = runs({"none": [26, 26.4, 27], "ngram-simple": [25, 25.5, 26], "ngram-mod": [28, 29, 30]},
              {"ngram-simple": 40})
    assert drafted(rs, SPECS[2].label) == 0 and drafted(rs, SPECS[1].label) == 40
    label, notes = best_peer(rs, SPECS)
    assert label == SPECS[0].label  # none, not ngram-mod's lucky 29
    assert any("ngram-mod" in n and "drafted nothing" in n for n in notes)


def test_a_drafting_column_still_wins_when_faster() -> None:
    rs = runs({"none": [26, 26, 26], "ngram-mod": [40, 41, 42]}, {"ngram-mod": 300})
    assert best_peer(rs, SPECS)[0] == SPECS[2].label


def test_without_none_a_plain_column_stays_and_is_named() -> None:
    specs = SPECS[1:]
    rs = runs({"ngram-simple": [25, 25, 25], "ngram-mod": [28, 28, 28]}, {"ngram-simple": 10})
    label, notes = best_peer(rs, specs)
    assert label == SPECS[2].label
    assert any("plain loop under another name" in n for n in notes)


def test_peer_best_names_the_column() -> None:
    rs = runs({"none": [26, 26, 26], "ngram-mod": [40, 41, 42]}, {"ngram-mod": 300})
    assert best_peer(rs, SPECS, fixed="none")[0] == SPECS[0].label
    with pytest.raises(ConfigError, match="--peer-best draft-simple: not among"):
        best_peer(rs, SPECS, fixed="draft-simple")


def test_peer_best_outside_the_spec_types_stops_before_any_run(capsys) -> None:
    """A --peer-best that cannot be among the columns is refused in one line (exit 2)
    before any model loads, not after the whole bench ran."""
    from localspec.cli.main import main

    rc = main(["bench", "speed", "--kinds", "chat", "--limit", "1", "--peer-spec-types", "none",
               "--peer-best", "ngram-mod"])
    err = capsys.readouterr().err
    assert rc == 2 and "--peer-best ngram-mod: not in --peer-spec-types" in err
    assert len(err.strip().splitlines()) == 1


def test_a_column_without_draft_counts_is_not_called_a_plain_loop() -> None:
    """A log that gave no count says nothing: the column competes on its speed."""
    rs = runs({"none": [26, 26, 26], "ngram-mod": [28, 28, 28]}, {})
    for r in rs:
        if r.label == SPECS[2].label:
            r.extra.pop("drafted")
    assert drafted(rs, SPECS[2].label) is None
    assert best_peer(rs, SPECS)[0] == SPECS[2].label
