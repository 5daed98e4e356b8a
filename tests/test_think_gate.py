"""The grammar behind a thinking block (decode/think_gate.py): free reasoning, a constrained
answer, as a function of the history alone. Pure tests on a fake grammar, one end-to-end run on
a tiny thinking model whose template leaves the block open."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.decode.think_gate import ANSWER, FIRST, THINKING, ThinkGate, think_gate
from localspec.session import ThinkMarkers

V = 12
OPEN, CLOSE = 10, 11
MARKERS = ThinkMarkers("<think>", "</think>", (OPEN,), (CLOSE,))


class Digits:
    """A grammar: tokens 0..3 only, at most 4 of them; counts what it consumed."""

    def __init__(self, n: int = 0) -> None:
        self.n = n

    def allowed(self, t: int) -> bool:
        return 0 <= t <= 3 and self.n < 4

    def mask(self) -> np.ndarray:
        return np.array([self.allowed(t) for t in range(V)])

    def consume(self, tokens) -> None:
        for t in tokens:
            assert self.allowed(t)
            self.n += 1

    def rollback(self, n: int) -> None:
        self.n -= n

    def valid_prefix(self, tokens) -> int:
        return next((i for i, t in enumerate(tokens) if not (0 <= t <= 3 and self.n + i < 4)), len(tokens))

    def forced(self, limit: int = 64) -> list[int]:
        return []

    def fork(self) -> Digits:
        return Digits(self.n)


def test_the_first_position_allows_the_open_marker_beside_the_grammar():
    g = ThinkGate(Digits(), (OPEN,), (CLOSE,), n_vocab=V)
    assert g.allowed(OPEN) and g.allowed(2) and not g.allowed(7)
    assert g.mask().tolist() == [True] * 4 + [False] * 6 + [True, False]
    g.consume([2])  # no thinking: the grammar from here on
    assert g.state == ANSWER and g.inner.n == 1 and not g.allowed(OPEN)


def test_the_block_is_free_and_the_answer_after_it_is_held():
    g = ThinkGate(Digits(), (OPEN,), (CLOSE,), n_vocab=V)
    g.consume([OPEN, 7, 8, 9, 5])  # reasoning: anything goes
    assert g.state == THINKING and g.mask().all() and g.inner.n == 0
    g.consume([CLOSE])
    assert g.state == ANSWER and g.allowed(1) and not g.allowed(7) and not g.allowed(OPEN)
    g.consume([1, 2])
    assert g.inner.n == 2
    g.rollback(4)  # back across the boundary: the grammar's consumption undone too
    assert g.state == THINKING and g.inner.n == 0
    assert g.valid_prefix([6, CLOSE, 1, 7]) == 3 and g.state == THINKING  # checked, not moved
    f = g.fork()
    f.consume([CLOSE, 3])
    assert g.state == THINKING and g.inner.n == 0 and f.inner.n == 1


def test_which_prompts_get_a_gate():
    inner = Digits()
    assert think_gate(inner, None, "x", V) is inner  # not a thinking model
    assert think_gate(inner, MARKERS, "q <think>\n\n</think>\n\n", V) is inner  # thinking switched off
    assert think_gate(inner, MARKERS, "q <think>\n", V).state == THINKING  # the template opened it
    assert think_gate(inner, MARKERS, "q ", V).state == FIRST  # the model may open one


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
@pytest.mark.model
def test_a_tiny_thinking_model_reasons_freely_under_a_grammar():
    """R1-style template (the prompt opens the block): the random model never closes it, so
    under a digits-only regex its greedy text equals its unconstrained text: the block is
    free. The same regex on a non-thinking prompt holds from the first token."""
    import tempfile
    from pathlib import Path

    from localspec.config import GenConfig, SamplingConfig
    from localspec.constrain import ConstraintSpec
    from localspec.models import resolve_model
    from tests.support import tiny_gguf as tg
    from tests.support.helpers import session

    d = Path(tempfile.mkdtemp())
    tok = tg.read_qwen25_tokenizer(resolve_model("qwen2.5-coder-0.5b"))
    r1 = tg.write_tiny(d / "r1.gguf", "qwen3", tok, seed=0, template=tg.OPEN_THINK_TEMPLATE)
    s = session(r1)
    try:
        spec = ConstraintSpec("regex", "[0-9]{1,40}")
        cfg = GenConfig(method="ar", n_predict=24, sampling=SamplingConfig(temp=0.0))
        ask = [{"role": "user", "content": "Count."}]
        free = list(s.generate(ask, cfg))[-1].text
        gated = list(s.generate(ask, GenConfig(method="ar", n_predict=24, sampling=SamplingConfig(temp=0.0),
                                               constraint=spec)))[-1].text
        assert "</think>" not in free and gated == free and not free.isdigit()
        raw = list(s.generate("Count:", GenConfig(method="ar", n_predict=8, sampling=SamplingConfig(temp=0.0),
                                                  constraint=spec)))[-1].text
        assert raw.isdigit()  # no block opened by the prompt and the model did not open one
    finally:
        s.close()
