"""A cost-model timing that tests hold and release one batch size at a time.

Why: what a generation does while the cost model is being timed (wait for the step in
flight, run plain decoding, never overlap a step) must be decided by events, not by how
fast a busy machine times real decodes. Patch it in for `curves.timing_steps`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path

import pytest

from localspec.costmodel import QUICK_SIZES, CostCurve, gate
from localspec.costmodel.curves import save_curve

SIZES = len(QUICK_SIZES)  # what a session counts per model (n_batch 512 holds them all)


class HeldTiming:
    """curves.timing_steps for tests: batch size i of a model runs only once the test
    allowed it (`allow`), and `entered` counts the sizes begun. Curves come out flat and
    equal for both models (speculation cannot pay), and are cached like real ones."""

    def __init__(self, sizes: int = SIZES, held: bool = True) -> None:
        self.sizes = sizes
        self.held = held
        self.entered = 0
        self.finished = 0
        self._go = threading.Semaphore(0)
        self._cond = threading.Condition()

    def allow(self, n: int = 1) -> None:
        for _ in range(n):
            self._go.release()

    def wait_entered(self, n: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.entered >= n, timeout=15), f"step {n} never began"

    def __call__(self, ctx: object, *, full: bool = False) -> Generator[tuple[int, int], None, CostCurve]:
        for i in range(self.sizes):
            with self._cond:
                self.entered += 1
                self._cond.notify_all()
            if self.held:
                assert self._go.acquire(timeout=30), "the test never let this step run"
            self.finished += 1
            yield i + 1, self.sizes
        c = CostCurve([1, 64], [0.010, 0.020])
        save_curve(ctx, c)
        return c


def wait_for(predicate: Callable[[], object], timeout: float = 15.0) -> None:
    """Poll until predicate() is true; fail loudly instead of hanging a test."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


@pytest.fixture()
def fresh_costs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A LOCALSPEC_HOME without cost curves, and a timer that steps as soon as it may (no
    quiet moment to wait for): import it into a test module and use it by name."""
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    monkeypatch.setattr(gate, "QUIET", 0.0)
    return tmp_path


def clock_decodes(monkeypatch: pytest.MonkeyPatch, perf_counter: Callable[[], float],
                  advance: Callable[[object, int], None]) -> None:
    """Give the cost model an injected clock: its timings and live samples read
    `perf_counter`, and every llama_decode calls `advance(ctx pointer, n tokens)` after the
    real decode, which moves that clock (what a decode costs is then the test's choice,
    not the machine's load: tests/test_costs_heal.py, tests/test_costs_recovery.py)."""
    import types

    import llama_cpp

    from localspec.backend import context
    from localspec.costmodel import curves

    real = llama_cpp.llama_decode

    def decode(ctx, batch):  # noqa: ANN001, ANN202 - llama_cpp's ctypes arguments
        rc = real(ctx, batch)
        advance(ctx, batch.n_tokens)
        return rc

    clock = types.SimpleNamespace(perf_counter=perf_counter)
    monkeypatch.setattr(context, "time", clock)
    monkeypatch.setattr(curves, "time", clock)
    monkeypatch.setattr(context.llama_cpp, "llama_decode", decode)
