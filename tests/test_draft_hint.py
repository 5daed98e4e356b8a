"""The draft model drafting with a lookup's hint (decode/drafters/model.propose's `hint`): the
lookup's continuation evaluated in the draft's first decode, used where the draft's own
tokens equal it. The draft is the same either way; only its decodes are fewer.

Checked directly on SmolLM2's Q4_0 draft and a tiny sliding-window (gemma3) draft (a right,
a partly right and a wrong hint give the draft's own tokens, with one decode saved per
hinted depth it kept, and a KV that drafts on as before); on tiny hybrid and recurrent
drafts a hint is ignored (one state cannot hold the hint's tokens beside the draft's); the
pricing's arithmetic; and auto on an edit, hinted and not: the
same text (AR's at T = 0; one sample's at T = 0.8, same seed), the same accepted lengths,
fewer draft decodes.
"""

from __future__ import annotations

import pytest

from localspec.backend import Context
from localspec.config import GenConfig, SamplingConfig
from localspec.costmodel import CostCurve
from localspec.costmodel.lookup import LookupGate, hint_length
from localspec.decode.drafters.model import propose
from localspec.decode.state import KVState
from tests.support.helpers import model
from tests.test_lookup import EDIT, greedy

GREEDY = SamplingConfig(temp=0.0)


def _state(path) -> KVState:
    m = model(path)
    st = KVState(Context(m, n_ctx=512, n_batch=128, n_seq_max=4, threads=1))
    st.sync(m.tokenize("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"))
    return st


def _draft(st: KVState, hint: list[int], L: int = 8):
    import numpy as np

    trie = propose(st, 1, L, GREEDY, np.random.default_rng(0), hint=hint)
    return [n.token for n in (trie.nodes[i] for i in trie.path[0])], trie


def _path(request, which: str):
    if which == "smollm2":
        return request.getfixturevalue("smollm2_q4_0_path")
    return request.getfixturevalue("tiny")[which + "-draft"]


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_a_hint_saves_the_decodes_of_the_depths_the_draft_agrees_with(request, which):
    from localspec.decode.drafters.model import commit_draft

    path = _path(request, which)
    own, plain = _draft(_state(path), [])
    assert plain.draft_calls == 8 and plain.hinted == 0  # pending + 7 depths (depth 8 is not evaluated)
    partly = own[:3] + [own[3] + 1] + own[4:]
    for hint, saved in ((own, 7), (partly, 3), ([own[0] + 1] + own[1:], 0)):
        tokens, trie = _draft(_state(path), hint)
        assert tokens == own, hint  # the draft's own tokens whatever the hint says
        assert trie.hinted == saved and trie.draft_calls == plain.draft_calls - saved
    # the KV after a partly right hint holds the draft's path, not the hint's: keep 5 of its
    # tokens and the next draft is the one an unhinted state drafts from the same history
    st, ref = _state(path), _state(path)
    _, trie = _draft(st, partly)
    _, ref_trie = _draft(ref, [])
    commit_draft(st, trie, 0, 5, own[5])
    commit_draft(ref, ref_trie, 0, 5, own[5])
    assert _draft(st, [])[0] == _draft(ref, [])[0]


@pytest.mark.parametrize("which", ["qwen35", "mamba2"])
def test_a_draft_with_a_recurrent_state_ignores_the_hint(request, which):
    path = _path(request, which)
    own, plain = _draft(_state(path), [])
    tokens, trie = _draft(_state(path), own)
    assert tokens == own and trie.hinted == 0 and trie.draft_calls == plain.draft_calls


def test_the_hint_length_pays_for_its_rows():
    cheap = CostCurve([1, 64], [0.010, 0.012])  # a batch row costs 1/300 of a step
    steep = CostCurve([1, 64], [0.010, 0.640])  # a row costs a step: nothing to save
    assert hint_length(0.0, cheap, 15) == 0  # a lookup that is never right
    assert hint_length(0.9, cheap, 15) == 15  # right nearly always, rows nearly free: all of it
    assert 0 < hint_length(0.5, cheap, 15) < 15  # alpha^m falls below what a row costs
    assert hint_length(0.9, steep, 15) == 0


def _auto(smollm2_path, smollm2_q4_0_path, monkeypatch, tmp_path, hint: bool, temp: float):
    from localspec import costmodel
    from tests.support.helpers import session

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    cheap = CostCurve([1, 64], [0.001, 0.002])
    flat = CostCurve([1, 64], [0.010, 0.012])
    monkeypatch.setattr(costmodel, "load_curve", lambda ctx: cheap if ctx.model.path == smollm2_q4_0_path else flat)
    monkeypatch.setattr(CostCurve, "observe", lambda self, n, sec, pos=None: None)
    # the lookup never drafts alone: every iteration is the draft model's, hinted or not
    monkeypatch.setattr(LookupGate, "best_length", lambda self, curve, n, longest, explore=True: (0, 1.0))
    s = session(smollm2_path, smollm2_q4_0_path)
    cfg = GenConfig(method="auto", n_predict=96, seed=1, sampling=SamplingConfig(temp=temp), K=1, auto_L=True,
                    spec_type=("ngram", "draft"), draft_hint=hint)
    ref = list(s.generate(EDIT, greedy("ar")))[-1] if temp == 0.0 else None
    return list(s.generate(EDIT, cfg))[-1], ref


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
@pytest.mark.parametrize("temp", [0.0, 0.8])
def test_auto_hints_the_draft_with_the_lookup_and_drafts_the_same(smollm2_path, smollm2_q4_0_path, monkeypatch,
                                                                   tmp_path, temp):
    hinted, ref = _auto(smollm2_path, smollm2_q4_0_path, monkeypatch, tmp_path / "a", True, temp)
    monkeypatch.undo()
    plain, _ = _auto(smollm2_path, smollm2_q4_0_path, monkeypatch, tmp_path / "b", False, temp)
    a, b = hinted.stats, plain.stats
    assert hinted.text == plain.text and (ref is None or hinted.text == ref.text)
    assert a.accepted_lengths == b.accepted_lengths and a.target_calls == b.target_calls
    assert a.draft_calls < b.draft_calls, (a.draft_calls, b.draft_calls)


def test_draft_hint_is_a_flag_and_a_bench_method():
    """--draft-hint turns the hint on (off by default); bench speed's `auto-hint` is auto with it."""
    from localspec.bench.speed import parse_grid
    from tests.test_settings import _asked as asked

    assert not asked().cfg.draft_hint and asked("--draft-hint").cfg.draft_hint
    specs = {s.label: s for s in parse_grid(["auto", "auto-hint+ngram,draft"], ["1:8"])}
    assert not specs["auto"].hint and specs["auto [ngram,draft] hint"].hint
    assert specs["auto [ngram,draft] hint"].gen(_bench_args(), 1).draft_hint
    assert not specs["auto"].gen(_bench_args(), 1).draft_hint


def _bench_args():
    import argparse

    return argparse.Namespace(n_predict=8, draft_temp=None, auto_free=True)
