"""KVState.prefetch on a real model: a prompt evaluated ahead and stopped inside a decode
(llama.cpp's abort callback) keeps an exact cache, and the turn after it answers what a fresh
session answers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from localspec.config import GenConfig
from localspec.events import Done
from localspec.stopflag import StopFlag
from tests.support.helpers import session


def _answer(sess, prompt: list[int]) -> str:
    cfg = GenConfig(method="ar", n_predict=12)
    cfg.sampling.temp = 0.0
    return next(e for e in sess.generate(prompt, cfg) if isinstance(e, Done)).text


def test_a_stopped_prefetch_leaves_an_exact_cache(smollm2_path: Path) -> None:
    sess = session(smollm2_path, n_ctx=4096, n_batch=2048, threads=2)
    fresh = session(smollm2_path, n_ctx=4096, n_batch=2048, threads=2)
    try:
        words = sess.tokenize(" ".join(f"item{i} = value{i * 7 % 13};" for i in range(300)))
        guess = words[:1800]
        stop = StopFlag()
        got: list[int] = []
        t = threading.Thread(target=lambda: got.append(sess.prefetch(guess, stop)))
        t0 = time.perf_counter()
        t.start()
        time.sleep(0.05)
        stop.set()
        t.join(60)
        stopped_after = time.perf_counter() - t0
        state = sess.target
        assert got and got[0] < len(guess) - 1, got  # stopped inside the one 1799-token decode
        assert state.ctx.pos_max(0) + 1 == len(state.tokens) and state.pending == []
        before = len(state.tokens)
        t1 = time.perf_counter()
        assert sess.prefetch(guess, StopFlag()) == len(guess) - 1 - before  # the rest, unstopped
        assert state.tokens == guess[:-1] and state.pending == [guess[-1]]
        assert stopped_after < (time.perf_counter() - t1) / 2, stopped_after  # stopped long before its end
        real = words[:1700] + sess.tokenize(" total = 0;")  # the user typed something else
        assert _answer(sess, real) == _answer(fresh, real)
        assert _answer(sess, guess) == _answer(fresh, guess)
    finally:
        sess.close()
        fresh.close()


class AfterFirstDecode:
    """A stop raised after the prefetch's first decode: inside the next one where a decode
    can be stopped (the loop never sees it set: only llama.cpp's abort callback ends that
    decode), between chunks where it cannot (recurrent states)."""

    def __init__(self) -> None:
        self.trips: list = []
        self.raised = False

    def on_set(self, fn):
        self.trips.append(fn)
        return lambda: None

    def is_set(self) -> bool:
        return self.raised and not self.trips

    def hit(self, _batch=None) -> None:
        self.raised = True
        for fn in self.trips:
            fn()


@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "gemma3"])  # hybrid, recurrent, sliding window
def test_a_prefetch_stopped_after_its_first_decode_keeps_ar_text_on_each_memory_kind(tiny, arch) -> None:
    """Stopped after its first decode, then a prompt that leaves the guess: the same text as
    a fresh session (the sliding window's stop aborts a decode inside llama.cpp)."""
    sess, fresh = session(tiny[arch]), session(tiny[arch])
    try:
        words = sess.tokenize(" ".join(f"w{i % 97} v{i % 13}" for i in range(500)))[:1100]
        stop = AfterFirstDecode()
        ctx = sess.target.ctx
        before, ctx.after_decode = ctx.after_decode, stop.hit
        try:
            n = sess.prefetch(words, stop)  # type: ignore[arg-type]
        finally:
            ctx.after_decode = before
        assert 0 < n < len(words) - 1 and n == len(sess.target.tokens), (n, len(sess.target.tokens))
        assert bool(stop.trips) == (arch == "gemma3")  # the abort callback where a decode can be stopped
        assert n == (ctx.n_batch if stop.trips else 32)  # the aborted decode's ubatch dropped / one chunk
        real = words[:900] + sess.tokenize(" total = 0;")
        assert _answer(sess, real) == _answer(fresh, real)
    finally:
        sess.close()
        fresh.close()
