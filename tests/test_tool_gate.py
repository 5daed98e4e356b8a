"""A tool call's grammar behind its trigger (decode/tool_gate.py): free text, then the call
held from the opening marker, free again once it is complete; FORCED writes the marker
first. Pure tests on a fake grammar, and exactness by enumeration: the gate's mask is a
function of the history, so every lossless verifier stays exact under it."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from localspec.decode.tool_gate import FORCED, FREE, GRAMMAR, ToolGate, tool_gate
from localspec.verify import VERIFIERS
from tests.support import exact as E
from tests.test_verify_masked import masked

V = 8
TRIG = (6, 7)  # the marker: two tokens


class Call:
    """A call's grammar: tokens 1..3, two of them, then complete (then only 0, its 'end')."""

    def __init__(self, n: int = 0) -> None:
        self.n = n

    def allowed(self, t: int) -> bool:
        return (1 <= t <= 3 and self.n < 2) or (t == 0 and self.n == 2)

    def mask(self) -> np.ndarray:
        return np.array([self.allowed(t) for t in range(V)])

    def can_end(self) -> bool:
        return self.n >= 2

    def consume(self, tokens) -> None:
        for t in tokens:
            assert self.allowed(t)
            self.n += 1

    def rollback(self, n: int) -> None:
        self.n -= n

    def valid_prefix(self, tokens) -> int:
        f = self.fork()
        for i, t in enumerate(tokens):
            if not f.allowed(t):
                return i
            f.consume([t])
        return len(tokens)

    def forced(self, limit: int = 64) -> list[int]:
        return []

    def fork(self) -> Call:
        return Call(self.n)


def test_free_until_the_marker_then_the_call_then_free_again():
    g = tool_gate(Call(), TRIG, True, V)
    assert isinstance(g, ToolGate) and g.state == FREE and g.mask().all()
    g.consume([4, 6, 5, 6])  # a marker started and broken off: still free
    assert g.state == FREE and g.seen == 1
    g.consume([7])
    assert g.state == GRAMMAR and g.mask().tolist() == [False, True, True, True] + [False] * 4
    assert not g.allowed(6) and not g.allowed(0)  # no end of turn inside a call
    g.consume([2, 3])
    assert g.state == GRAMMAR and g.mask().all()  # complete: the model may go on
    g.consume([5])  # the grammar does not take it: free again (the closing tag, prose, ...)
    assert g.state == FREE and len(g.calls) == 1
    g.consume([6, 7, 1])  # a second call gets a fresh grammar
    assert g.state == GRAMMAR and len(g.calls) == 2 and g.calls[-1].n == 1 and g.calls[0].n == 2
    g.rollback(3)  # back across the second marker
    assert g.state == FREE and len(g.calls) == 1 and g.seen == 0
    g.rollback(3)  # and into the first call
    assert g.state == GRAMMAR and g.calls[0].n == 0


def test_forced_writes_the_marker_first_and_forks_are_independent():
    g = tool_gate(Call(), TRIG, False, V)
    assert g.state == FORCED and g.mask().tolist() == [False] * 6 + [True, False]
    assert g.forced() == [6, 7] and not g.allowed(1)
    assert g.valid_prefix([6, 7, 1, 2, 5]) == 4 and g.state == FORCED  # checked, not moved; no prose after
    assert g.valid_prefix([6, 1]) == 1
    g.consume([6, 7])
    f = g.fork()
    f.consume([1, 1])
    assert g.calls[-1].n == 0 and f.calls[-1].n == 2
    assert tool_gate(Call(), (), False, V).__class__ is Call  # no marker: the plain grammar


def test_strict_calls_end_with_the_closing_marker_then_the_turn():
    g = tool_gate(Call(), TRIG, False, V, close=(5, 4), eog=(0,))
    g.consume([6, 7, 1, 2])
    assert g.allowed(5) and not g.allowed(0) and not g.allowed(4)  # no end before the closing marker
    g.consume([5])
    assert g.mask().tolist() == [False] * 4 + [True] + [False] * 3 and g.forced() == [4]
    g.consume([4])
    assert g.mask().tolist() == [True] + [False] * 5 + [True, False]  # the end, or another call
    g.consume([6])
    assert g.mask().tolist() == [False] * 7 + [True]
    g.consume([7, 3])
    assert len(g.calls) == 2 and g.calls[-1].n == 1
    g.rollback(3)
    assert len(g.calls) == 1 and g.allowed(0) and g.allowed(6)
    one = tool_gate(Call(), TRIG, False, V, close=(5,), eog=(0,), parallel=False)
    one.consume([6, 7, 3, 3, 5])
    assert one.mask().tolist() == [True] + [False] * 7  # one call: then only the end
    bare = tool_gate(Call(), TRIG, False, V, eog=(0,))  # no closing marker (Mistral's array)
    bare.consume([6, 7, 2, 2])
    assert bare.allowed(0) and bare.allowed(6) and not bare.allowed(5)


def gate_allow(lazy: bool):
    """The gate's mask after a context, as a 0/1 row (a fresh gate per context)."""

    @functools.cache
    def row(c: tuple[int, ...]) -> np.ndarray:
        g = tool_gate(Call(), (1,), lazy, V3, close=() if lazy else (2,), eog=(0,))
        for t in c:
            if not g.allowed(t):  # a context the gate never lets happen: any row will do
                return np.ones(V3)
            g.consume([t])
        return g.mask().astype(float)[:V3]

    return lambda c: row(tuple(c))


V3 = 4  # tokens 0..3: 1 is the marker (and a call token), a call is two of 1..3


@pytest.mark.parametrize("lazy", [True, False])
@pytest.mark.parametrize("name,K", [("sd", 1), ("gbv", 1), ("spectr", 2),
                                    pytest.param("mdbv", 2, marks=pytest.mark.slow)])  # ~8 s: the long tier
@pytest.mark.parametrize("seed", [0])
def test_the_gate_keeps_every_verifier_exact(lazy, name, K, seed):
    """Enumerated over all contexts of 3 tokens: the law the verifier emits under the gated
    mask is the masked target's law (tests/support/exact.py), and nothing refused is emitted."""
    L = 3
    g = np.random.default_rng(seed)
    allow = gate_allow(lazy)
    tgt = masked(E.dirichlet_model(V3, L, g, 1.0), allow)
    drf = masked(E.zeros_model(V3, L, g, 0.7), allow)
    lw = E.step_law(VERIFIERS[name], tgt, drf, V3, L, K)
    assert abs(sum(lw.values()) - 1.0) < 1e-12
    assert E.strict_error(lw, tgt, V3, L) < 1e-10
    for z in lw:
        assert all(allow(z[:i])[t] for i, t in enumerate(z))
    # the gate is not the identity: it refuses something somewhere
    assert any(not allow(c).all() for c in [(), (1,), (1, 2), (0, 1)])


# ------------------------------------------------------------------------------ on a model
CALL_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}]
CALL_ASK = [{"role": "user", "content": "What is the weather in Paris? Call a tool."}]


@pytest.fixture(scope="module")
def strict_call(smollm2_path, smollm2_q4_0_path):
    """SmolLM2 (target Q4_1, draft Q4_0) under `required`'s gate, and plain decoding's text."""
    from localspec.constrain import ConstraintSpec, Trigger
    from localspec.toolcall import FORMATS, call_grammar
    from tests.support.helpers import session

    fmt = FORMATS["hermes"]
    spec = ConstraintSpec("lark", call_grammar(fmt, CALL_TOOLS), trigger=Trigger(fmt.open, fmt.close, lazy=False))
    s = session(smollm2_path, smollm2_q4_0_path)
    yield s, spec, _run(s, spec, "ar")
    s.close()


def _run(s, spec, method: str, **kw):
    from localspec.config import GenConfig, SamplingConfig

    cfg = GenConfig(method=method, n_predict=60, sampling=SamplingConfig(temp=0.0), constraint=spec, **kw)
    return list(s.generate(CALL_ASK, cfg))[-1]


@pytest.mark.parametrize("method,K,spec_type", [("sd", 1, None), ("mdbv", 2, None), ("sd", 1, ("ngram+draft",))])
def test_every_method_writes_ar_text_under_a_strict_call(strict_call, method, K, spec_type):
    """The engine's wiring of the gate: `required`'s forced marker, the call's grammar, the
    closing marker and the end are the same text under speculation as under plain decoding,
    the call parses, and the forced stretches are drafted by the grammar, never rejected."""
    from localspec.toolcall import FORMATS, parse_calls

    s, spec, ref = strict_call
    assert ref.text.startswith("<tool_call>") and ref.text.rstrip().endswith("</tool_call>") and ref.reason == "eog"
    assert parse_calls(ref.text, FORMATS["hermes"], CALL_TOOLS).calls[0].name == "get_weather"
    done = _run(s, spec, method, K=K, L=5, spec_type=spec_type)
    assert done.text == ref.text
    drafted, kept = done.stats.proposed.get("grammar", (0, 0))
    assert drafted > 0 and kept == drafted
