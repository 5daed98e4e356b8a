"""Slots over models that keep a recurrent state (hybrid qwen35, pure mamba2).

A recurrent state is one per sequence and cannot lose a span, so a slot on such a model gets
two sequences of the shared context (its main state and one branch), and rolls a rejected
draft back with llama.cpp's per-sequence snapshots where the arch keeps them (qwen35), or
adopts a branch whole (mamba2). These tests run three slots at once, two turns each, on tiny
random-weight models (tests/support/tiny_gguf), whose greedy text turns on every bit of
the state: a slot that read another's state, or rolled its own back wrong, would leave AR's
text within a few tokens.
"""

from __future__ import annotations

import threading

import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.pool import open_pool
from localspec.session import SessionOptions
from tests.support.helpers import session

PROMPTS = ["Write a haiku about rain.", "List three prime numbers.", "What is Python?"]
N = 32


def solo_ar(target, draft) -> list[list[int]]:
    s = session(target, draft)
    try:
        out = []
        for p in PROMPTS:
            list(s.generate([{"role": "user", "content": p}], GenConfig(method="ar", n_predict=N, sampling=SamplingConfig(temp=0.0))))
            out.append(list(s.last_tokens))
        return out
    finally:
        s.close()


@pytest.mark.parametrize("arch,method", [("qwen35", "sd"), ("qwen35", "auto"), ("mamba2", "sd")])
def test_slots_on_a_recurrent_state_write_ar_text(tiny, arch, method):
    target, draft = tiny[arch], tiny[arch + "-draft"]
    ref = solo_ar(target, draft)
    cfg = GenConfig(method=method, n_predict=N, L=4, sampling=SamplingConfig(temp=0.0))
    pool = open_pool(str(target), str(draft), SessionOptions(n_ctx=3072, n_batch=384, n_seq_max=8, threads=1), 3)
    out: dict[tuple[int, int], tuple[list[int], int]] = {}
    kept: dict[tuple[int, int], int] = {}
    go = threading.Barrier(3)

    def run(i: int) -> None:
        go.wait()
        with pool.active(i):
            s = pool.slots[i]
            for turn in range(2):  # the second turn is a new conversation: the state restarts
                done = list(s.generate([{"role": "user", "content": PROMPTS[(i + turn) % 3]}], cfg))[-1]
                out[(i, turn)] = (list(s.last_tokens), s.target.reevaluated)
                kept[(i, turn)] = sum(done.stats.accepted_lengths)

    try:
        assert pool.base.target.ctx.n_seq_max == 6  # two per slot, whatever -K asked for
        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        made = sum(s.target.ctx.n_decodes + s.draft.ctx.n_decodes for s in pool.slots)
        assert pool.rounds.decodes < made  # the slots' decodes were joined
    finally:
        pool.close()
    assert len(out) == 6
    for (i, turn), (toks, reevaluated) in out.items():
        assert toks == ref[(i + turn) % 3], (i, turn)
        if arch == "qwen35":
            assert reevaluated == 0  # rejected tails rolled back in place, per slot
    if method == "sd":
        assert sum(kept.values()) > 0  # drafts were really verified and partly kept
