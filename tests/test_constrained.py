"""Constrained decoding end to end on SmolLM2 (target Q4_1, draft Q4_0): a JSON schema, every
method and drafter, greedy text = AR's under the same constraint, forced tokens drafted free.

The law-level proof is tests/test_verify_masked.py (enumeration); here the engine's wiring is
checked: the rows the verifiers read are masked at their own trie node, model drafts sample
masked rows, lookups are cut, the grammar drafter drafts what the schema forces, and the
answer is valid JSON of the schema under every method, greedy or sampled.
"""

from __future__ import annotations

import json

import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.constrain import ConstraintSpec
from localspec.errors import ConfigError
from localspec.events import Accepted

SCHEMA = json.dumps({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
                   "color": {"enum": ["red", "green", "blue"]}},
    "required": ["name", "age", "color"], "additionalProperties": False,
})
SPEC = ConstraintSpec("json_schema", SCHEMA)
ASK = [{"role": "user", "content": "Describe a person as JSON with a name, an age and a favourite color."}]


def greedy(method: str, **kw) -> GenConfig:
    return GenConfig(method=method, n_predict=kw.pop("n_predict", 60), sampling=SamplingConfig(temp=0.0),
                     constraint=kw.pop("constraint", SPEC), **kw)


def valid(text: str) -> dict:
    obj = json.loads(text)
    assert set(obj) == {"name", "age", "color"} and isinstance(obj["age"], int) and obj["color"] in ("red", "green", "blue")
    return obj


@pytest.fixture(scope="module")
def smol(smollm2_path, smollm2_q4_0_path):
    from tests.support.helpers import session

    s = session(smollm2_path, smollm2_q4_0_path)
    ref = list(s.generate(ASK, greedy("ar")))[-1]
    return s, ref


def test_ar_under_a_schema_writes_valid_json(smol):
    s, ref = smol
    valid(ref.text)
    assert ref.reason == "eog" and ref.stats.constraint == "json_schema"
    free = list(s.generate(ASK, greedy("ar", constraint=None)))[-1]
    assert free.text != ref.text and free.stats.constraint == ""  # the next turn is free again


@pytest.mark.parametrize("method,K,spec_type", [
    ("sd", 1, None), ("gbv", 1, None), ("mdbv", 2, None), ("spectr", 2, None),
    ("sd", 1, ("ngram",)), ("sd", 1, ("ngram", "draft")), ("sd", 1, ("ngram+draft",)), ("gbv", 1, ("suffix",)),
])
def test_every_method_and_drafter_gives_ar_text_under_the_schema(smol, method, K, spec_type):
    s, ref = smol
    events = list(s.generate(ASK, greedy(method, K=K, L=5, spec_type=spec_type)))
    done = events[-1]
    assert done.text == ref.text
    valid(done.text)
    st = done.stats
    forced = st.proposed.get("grammar", (0, 0))
    assert forced[1] == forced[0]  # a forced token is never rejected
    assert st.to_json()["forced"] == forced[0] and st.to_json()["constraint"] == "json_schema"
    assert st.target_calls < st.n_tokens  # speculation paid for itself in target calls


RECORD = json.dumps({
    "type": "object",
    "properties": {"kind": {"const": "person-record, version two"}, "name": {"type": "string", "maxLength": 10},
                   "color": {"enum": ["red", "green", "blue"]}},
    "required": ["kind", "name", "color"], "additionalProperties": False,
})


@pytest.mark.parametrize("spec_type", [("ngram",), None])
def test_forced_stretches_are_drafted_by_the_grammar_and_never_rejected(smol, spec_type):
    """A constant string is forced token after token: the grammar drafter writes it (the
    chain tries it first), every forced token is kept, and the text is AR's."""
    s, _ = smol
    spec = ConstraintSpec("json_schema", RECORD)
    ref = list(s.generate(ASK, greedy("ar", constraint=spec)))[-1]
    events = list(s.generate(ASK, greedy("sd", L=6, spec_type=spec_type, constraint=spec)))
    done = events[-1]
    assert done.text == ref.text and json.loads(done.text)["kind"] == "person-record, version two"
    drafted, kept = done.stats.proposed.get("grammar", (0, 0))
    assert drafted >= 3 and kept == drafted
    assert "grammar" in {ev.source for ev in events if isinstance(ev, Accepted) and ev.tokens}


def test_auto_drafts_forced_tokens_first(smol, monkeypatch, tmp_path):
    from localspec import costmodel
    from localspec.costmodel import CostCurve

    s, ref = smol
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    flat = CostCurve([1, 64], [0.010, 0.012])
    monkeypatch.setattr(costmodel, "load_curve", lambda ctx: flat)
    s.costs = None
    done = list(s.generate(ASK, greedy("auto", auto_K=True, auto_L=True, seed=1)))[-1]
    s.costs = None
    assert done.text == ref.text
    assert done.stats.proposed.get("grammar", (0, 0))[0] > 0


@pytest.mark.slow  # > 7 s on 2 cores: the long tier (README's command stays short)
@pytest.mark.parametrize("method,K", [("sd", 1), ("mdbv", 3)])
def test_sampled_answers_are_valid_json(smol, method, K):
    s, _ = smol
    for seed in range(3):
        cfg = GenConfig(method=method, K=K, L=4, n_predict=60, seed=seed, constraint=SPEC,
                        sampling=SamplingConfig(temp=1.0, top_k=0, top_p=1.0, min_p=0.0))
        done = list(s.generate(ASK, cfg))[-1]
        if done.reason == "eog":  # 60 tokens may end inside a long name: then only a prefix is valid
            valid(done.text)


def test_a_grammar_that_does_not_compile_is_one_line_before_any_event(smol):
    s, _ = smol
    with pytest.raises(ConfigError) as e:
        s.generate(ASK, greedy("sd", constraint=ConstraintSpec("gbnf", "root ::= foo")))
    assert "\n" not in str(e.value)


def test_gbnf_and_regex_constrain_too(smol):
    s, _ = smol
    done = list(s.generate(ASK, greedy("sd", L=4, constraint=ConstraintSpec("regex", "(yes|no|maybe), [a-z ]{1,20}\\."))))[-1]
    head, _, tail = done.text.partition(", ")
    assert head in ("yes", "no", "maybe") and tail.endswith(".")
    gb = ConstraintSpec("gbnf", 'root ::= "[" num ("," num)* "]"\nnum ::= [0-9]+')
    done = list(s.generate(ASK, greedy("sd", L=4, constraint=gb)))[-1]
    assert all(x.isdigit() for x in done.text.strip("[]").split(",")) and done.text.startswith("[")


@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "gemma3"])
def test_every_memory_kind_keeps_ar_text_under_a_grammar(tiny, arch):
    """The grammar state follows the target's commits on a hybrid (state snapshots), a
    recurrent (branch copies) and a sliding-window memory as on attention: sd with the
    near-copy draft (partial acceptances) and with lookups gives AR's text under the same regex."""
    import re

    from tests.support.helpers import session

    spec = ConstraintSpec("regex", "[a-z]{2,8}( [a-z]{2,8}){3,12}\\.")
    s = session(tiny[arch], tiny[arch + "-draft"])
    try:
        ask = "Write a story about a robot who learns to paint."
        ref = list(s.complete(ask, greedy("ar", n_predict=40, constraint=spec)))[-1]
        assert re.fullmatch("[a-z]{2,8}( [a-z]{2,8}){3,12}\\.?", ref.text), ref.text
        for spec_type in (None, ("ngram", "draft")):
            done = list(s.complete(ask, greedy("sd", L=4, n_predict=40, constraint=spec, spec_type=spec_type)))[-1]
            assert done.text == ref.text, (arch, spec_type)
            assert done.stats.target_calls < done.stats.n_tokens or done.stats.n_tokens < 4
    finally:
        s.close()
