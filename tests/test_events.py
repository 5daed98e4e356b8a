"""Stats: the typed merge of two generations of one answer (a thinking budget's phases)."""

from __future__ import annotations

from dataclasses import fields

from localspec.events import MERGE, Stats


def test_every_stats_field_has_a_merge_rule():
    assert set(MERGE) == {f.name for f in fields(Stats)}
    assert set(MERGE.values()) <= {"first", "add", "per-position", "join", "per-key"}


def test_merge_keeps_what_was_asked_and_adds_what_was_done():
    a = Stats(method="sd", K=1, L=4, prompt_tokens=9, n_tokens=3, iterations=2, seconds=0.5, ran="sd K=1 L=4",
              accepted_lengths=[2, 0], position_trials=[2, 1], position_accepts=[1, 1], choice_note="why")
    b = Stats(method="ar", prompt_tokens=20, n_tokens=2, iterations=2, seconds=0.25, ran="ar",
              position_trials=[1], position_accepts=[0], choice_note="other")
    m = a.merged(b)
    assert (m.method, m.K, m.L, m.prompt_tokens, m.choice_note) == ("sd", 1, 4, 9, "why")
    assert (m.n_tokens, m.iterations, m.seconds) == (5, 4, 0.75)
    assert m.accepted_lengths == [2, 0] and m.position_trials == [3, 1] and m.position_accepts == [1, 1]
    assert m.ran == "sd K=1 L=4; ar" and a.merged(Stats(ran="sd K=1 L=4")).ran == "sd K=1 L=4"
    assert a.n_tokens == 3 and a.accepted_lengths == [2, 0]  # the inputs are left as they were
