"""Constraints (localspec/constrain over llguidance) on SmolLM2's real 49,152-token vocabulary.

What the engine relies on: the mask admits exactly what the grammar does (and agrees with the
cheap per-token `allowed`), every end-of-generation id is allowed exactly when the grammar may
end, consume / rollback / fork keep positions exact (rollback gives back the same mask, bit
for bit), a refused token changes nothing, and a broken or unsatisfiable grammar is a one-line
ConfigError. `pytest -s` prints the median and p99 time of mask / allowed / valid_prefix over
200 positions (printed, never asserted: timings belong to the machine, not the code).
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import pytest

from localspec.backend import Model
from localspec.backend.grammar import eog_ids, ll_tokenizer
from localspec.constrain import Constraint, ConstraintSpec
from localspec.constrain.spec import one_line
from localspec.errors import ConfigError
from tests.support.helpers import model

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "kind": {"enum": ["cat", "dog"]},
    },
    "required": ["name", "age", "kind"],
    "additionalProperties": False,
}
GOOD = '{"name": "x", "age": 3, "kind": "cat"}'
ARITH = r"""
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
"""


@pytest.fixture(scope="module")
def mdl(smollm2_path) -> Model:
    return model(smollm2_path)


@pytest.fixture(scope="module")
def make(mdl):
    tok, eog = ll_tokenizer(mdl), eog_ids(mdl)

    def build(kind: str, text: str = "") -> Constraint:
        return Constraint(ConstraintSpec(kind, text), tok, mdl.n_vocab, eog)

    return build


@pytest.fixture(scope="module")
def schema(make) -> Constraint:
    return make("json_schema", json.dumps(SCHEMA))


def _ends_allowed(m, eog) -> bool:
    mask = m.mask()
    assert len({bool(mask[t]) for t in eog}) == 1, "every end id is allowed, or none"
    assert all(m.allowed(t) == bool(mask[t]) for t in eog)
    return bool(mask[eog[0]])


# ---------------------------------------------------------------------- the vocabulary side
def test_eog_ids_are_every_end_token_and_the_tokenizers_eos_set(mdl) -> None:
    eog = eog_ids(mdl)
    assert eog == [t for t in range(mdl.n_vocab) if mdl.is_eog(t)]
    assert mdl.eos in eog and mdl.tokenize("<|im_end|>")[0] in eog
    tok = ll_tokenizer(mdl)
    assert sorted(tok.eos_tokens) == eog and tok.vocab_size == mdl.n_vocab


def test_tokenizer_is_cached_per_file_and_outlives_a_closed_model(mdl, smollm2_path, schema) -> None:
    """A second Model of the same file gets the same tokenizer (no 2 s rebuild), and closing
    that model does not break it: the cache tokenizes on a vocabulary it owns."""
    other = Model(smollm2_path)
    assert ll_tokenizer(other) is ll_tokenizer(mdl)
    other.close()
    m = schema.matcher()
    m.consume(mdl.tokenize('{"name": "x", "'))
    assert mdl.detokenize(m.forced()).startswith("age")  # forced tokens are tokenized by llama.cpp


def test_every_end_id_ends_even_where_llguidance_knows_one_eos(mdl) -> None:
    """A tokenizer whose EOS is <|im_end|> alone: <|endoftext|> and <reponame> (llama.cpp's
    other end ids) are still allowed exactly when the grammar may end, and consumed as ends."""
    from llguidance.llamacpp import lltokenizer_from_vocab

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        one = lltokenizer_from_vocab(mdl.vocab, eos_token=mdl.eos)
    assert list(one.eos_tokens) == [mdl.eos]
    eog = eog_ids(mdl)
    others = [t for t in eog if t != mdl.eos]
    assert others
    c = Constraint(ConstraintSpec("json_schema", json.dumps(SCHEMA)), one, mdl.n_vocab, eog)
    m = c.matcher()
    ids = mdl.tokenize(GOOD)
    assert not _ends_allowed(m, eog) and m.valid_prefix([others[0]]) == 0
    m.consume(ids)
    assert _ends_allowed(m, eog) and set(np.flatnonzero(m.mask())) == set(eog)
    assert m.valid_prefix(others) == len(others)
    m.consume(others[:1])
    assert m.done and m.consumed == len(ids) + 1
    m.rollback(1)
    assert m.consumed == len(ids) and m.valid_prefix(ids[:1]) == 0


# ---------------------------------------------------------------------- JSON schema
def test_schema_start_mask_allows_only_brace_tokens(schema, mdl) -> None:
    mask = schema.matcher().mask()
    assert mask.dtype == bool and mask.shape == (mdl.n_vocab,)
    allowed = np.flatnonzero(mask)
    assert len(allowed) > 0 and all(mdl.piece(int(t)).startswith(b"{") for t in allowed)
    assert mdl.tokenize("{")[0] in allowed
    assert not mask[eog_ids(mdl)].any()


def test_a_valid_text_is_consumed_and_ends(schema, mdl) -> None:
    eog = eog_ids(mdl)
    ids = mdl.tokenize(GOOD)
    im_end = mdl.tokenize("<|im_end|>")[0]
    m = schema.matcher()
    start = m.mask()
    assert m.valid_prefix(ids) == len(ids)
    assert m.valid_prefix(ids + [im_end, im_end]) == len(ids) + 2  # whether it may end there ...
    assert m.valid_prefix(ids[:-1] + [im_end]) == len(ids) - 1
    assert np.array_equal(m.mask(), start) and m.consumed == 0  # ... is asked without moving
    for i, t in enumerate(ids):
        assert not m.done and not _ends_allowed(m, eog), i
        assert m.allowed(t)
        m.consume([t])
    assert m.done and _ends_allowed(m, eog)
    assert set(np.flatnonzero(m.mask())) == set(eog)  # the object is closed: only ending
    assert m.forced() == []
    assert m.valid_prefix([im_end, im_end]) == 2 and m.valid_prefix([im_end, ids[0]]) == 1
    m.consume([im_end])
    assert m.done and m.consumed == len(ids) + 1
    assert set(np.flatnonzero(m.mask())) == set(eog) and not m.allowed(ids[0])
    with pytest.raises(ValueError):
        m.consume([ids[0]])
    m.rollback(2)  # the end and the closing token
    assert not m.done and m.allowed(ids[-1]) and not _ends_allowed(m, eog)


def test_valid_prefix_stops_at_the_first_wrong_token(schema, mdl) -> None:
    bad = mdl.tokenize('{"name": "x", "agx": 3}')
    texts = [mdl.detokenize(bad[: k + 1]) for k in range(len(bad))]
    first_wrong = next(k for k, t in enumerate(texts) if "agx" in t)
    m = schema.matcher()
    before = m.mask()
    assert m.valid_prefix(bad) == first_wrong
    assert np.array_equal(m.mask(), before) and m.consumed == 0  # asking changes nothing
    m.consume(bad[:first_wrong])
    assert not m.allowed(bad[first_wrong]) and m.valid_prefix(bad[first_wrong:]) == 0
    # an end id is refused before the object is complete, in valid_prefix and consume
    assert m.valid_prefix([eog_ids(mdl)[0]]) == 0


def test_a_refused_token_leaves_the_state_as_it_was(schema, mdl) -> None:
    ids = mdl.tokenize(GOOD)
    m = schema.matcher()
    m.consume(ids[:5])
    before = m.mask()
    for bad in ([ids[5], mdl.tokenize("]")[0]], [eog_ids(mdl)[0]], [ids[5], 10**9], [-1]):
        with pytest.raises(ValueError):
            m.consume(bad)
        assert m.consumed == 5 and np.array_equal(m.mask(), before)
    m.consume(ids[5:])
    assert m.done


def test_forced_tokens_after_a_key_name_the_next_key(mdl, make) -> None:
    """With every key required, llguidance writes them in the schema's order: after the
    first value the next key's text is forced."""
    c = make("json_schema", json.dumps(SCHEMA))
    m = c.matcher()
    m.consume(mdl.tokenize('{"name": "x", "'))
    forced = m.forced()
    assert forced and mdl.detokenize(forced).startswith("age")
    assert len(m.forced(limit=1)) == 1 and m.forced(limit=0) == []
    assert m.valid_prefix(forced) == len(forced)
    m.consume(forced)
    assert mdl.detokenize(mdl.tokenize('{"name": "x", "') + forced).startswith('{"name": "x", "age')


def test_rollback_restores_the_mask_exactly(schema, mdl) -> None:
    ids = mdl.tokenize(GOOD) + [eog_ids(mdl)[1]]
    m = schema.matcher()
    masks = []
    for t in ids:
        masks.append(m.mask().copy())
        m.consume([t])
    masks.append(m.mask().copy())
    for k in range(len(ids), 0, -1):  # one at a time
        assert np.array_equal(m.mask(), masks[k]), k
        m.rollback(1)
    assert np.array_equal(m.mask(), masks[0])
    m.consume(ids)
    m.rollback(7)  # several at once, across the end
    assert np.array_equal(m.mask(), masks[len(ids) - 7]) and m.consumed == len(ids) - 7
    with pytest.raises(ValueError):
        m.rollback(m.consumed + 1)  # beyond the start: refused, nothing lost
    assert np.array_equal(m.mask(), masks[len(ids) - 7])
    m.rollback(0)
    m.rollback(m.consumed)
    assert np.array_equal(m.mask(), masks[0])


def test_fork_is_independent(schema, mdl) -> None:
    ids = mdl.tokenize(GOOD)
    a = schema.matcher()
    a.consume(ids[:4])
    b = a.fork()
    at4 = a.mask().copy()
    b.consume(ids[4:])
    assert b.done and not a.done and np.array_equal(a.mask(), at4) and a.consumed == 4
    a.rollback(4)
    assert b.done and b.consumed == len(ids)
    b.rollback(len(ids) - 4)
    assert np.array_equal(b.mask(), at4)
    c1, c2 = schema.matcher(), schema.matcher()
    c1.consume(ids[:3])
    assert c2.consumed == 0 and np.array_equal(c2.mask(), schema.matcher().mask())


def test_allowed_agrees_with_the_mask_on_every_token(schema, make, mdl) -> None:
    """`allowed` asks llguidance about one token; it must say what the mask says."""
    arith = make("gbnf", ARITH)
    for c, text, at in ((schema, GOOD, (0, 3, 9, 16, 18)), (arith, "(12+3)*4", (0, 2, 5))):
        ids = mdl.tokenize(text)
        m = c.matcher()
        for k in at:
            m.rollback(m.consumed)
            m.consume(ids[:k])
            mask = m.mask()
            got = np.fromiter((m.allowed(t) for t in range(mdl.n_vocab)), bool, mdl.n_vocab)
            assert np.array_equal(got, mask), (text, k, np.flatnonzero(got != mask)[:5])


# ---------------------------------------------------------------------- other kinds
def test_gbnf_arithmetic(make, mdl) -> None:
    c = make("gbnf", ARITH)
    eog = eog_ids(mdl)
    m = c.matcher()
    ids = mdl.tokenize("(12+3)*4")
    assert m.valid_prefix(ids) == len(ids)
    m.consume(ids[:-2])
    assert not _ends_allowed(m, eog)  # "(12+3)*" needs a factor
    m.consume(ids[-2:])
    assert _ends_allowed(m, eog) and not m.done  # more digits may follow
    assert m.valid_prefix(mdl.tokenize("+")) == 1
    bad = mdl.tokenize("1+*2")
    assert c.matcher().valid_prefix(bad) == 2
    assert c.matcher().valid_prefix(mdl.tokenize("a")) == 0
    lark = make("gbnf", 'start: "(" NUMBER ")"\nNUMBER: /[0-9]+/')  # Lark text passes, as in llama.cpp
    assert lark.matcher().valid_prefix(mdl.tokenize("(42)")) == len(mdl.tokenize("(42)"))


def test_lark(make, mdl) -> None:
    c = make("lark", 'start: answer\nanswer: "yes" | "no"')
    m = c.matcher()
    assert m.allowed(mdl.tokenize("yes")[0]) and m.allowed(mdl.tokenize("no")[0])
    assert not m.allowed(mdl.tokenize("maybe")[0])
    m.consume(mdl.tokenize("yes"))
    assert m.done and m.allowed(eog_ids(mdl)[0])


def test_regex(make, mdl) -> None:
    c = make("regex", r"[0-9]{3}-[0-9]{4}")
    m = c.matcher()
    ids = mdl.tokenize("555-1234")
    assert m.valid_prefix(ids + ids) == len(ids)
    m.consume(ids)
    assert m.done
    assert c.matcher().valid_prefix(mdl.tokenize("55-1234")) < len(mdl.tokenize("55-1234"))


def test_json_object(make, mdl) -> None:
    c = make("json_object")
    eog = eog_ids(mdl)
    for text in ("{}", '{"a": [1, 2.5, {"b": null}], "c": "d"}'):
        m = c.matcher()
        ids = mdl.tokenize(text)
        m.consume(ids)
        assert _ends_allowed(m, eog), text
    assert c.matcher().valid_prefix(mdl.tokenize("[1]")) == 0
    assert c.matcher().valid_prefix(mdl.tokenize('{"a" 1}')) < len(mdl.tokenize('{"a" 1}'))


@pytest.mark.parametrize("kind", ["json_object", "json_schema"])
def test_json_whitespace_is_bounded(make, mdl, kind) -> None:
    """Between JSON tokens: nothing, one space, or one or two newlines and up to 20 blanks (as
    llama.cpp's schema converter); never an endless run a weak model can loop in."""
    c = make(kind, json.dumps(SCHEMA) if kind == "json_schema" else "")
    ok = "{\n" + " " * 20
    assert c.matcher().valid_prefix(mdl.tokenize(ok)) == len(mdl.tokenize(ok))
    for bad in ("{" + " " * 2, "{\n\n\n", "{\n" + " " * 21, "{\r"):
        ids = mdl.tokenize(bad)
        assert c.matcher().valid_prefix(ids) < len(ids), repr(bad)


# ---------------------------------------------------------------------- refusals
@pytest.mark.parametrize(("kind", "text", "words"), [
    ("gbnf", "root ::= expr\nexpr ::= foo", ["GBNF grammar", "foo"]),
    ("gbnf", 'root ::= "a" (', ["GBNF grammar", ")"]),
    ("gbnf", 'expr ::= "a"', ["GBNF grammar", "root"]),
    ("lark", 'start: item\nitem: "a" | missing', ["Lark grammar", "line 2", "missing"]),
    ("regex", "a(b", ["regex", "unclosed group"]),
    ("json_schema", '{"type": "objec"}', ["JSON schema", "objec"]),
    ("json_schema", '{"type": "object", "properties": {"a": {"$ref": "#/nope"}}}', ["JSON schema", "nope"]),
    ("json_schema", '{"type": "object",', ["JSON schema", "not valid JSON", "line 1"]),
    ("json_object", "{}", ["no text"]),
    ("yaml", "a: b", ["unknown constraint kind", "json_schema"]),
])
def test_a_broken_grammar_is_one_line(kind, text, words) -> None:
    with pytest.raises(ConfigError) as e:
        ConstraintSpec(kind, text, origin="--grammar").grammar()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--grammar: ") and len(msg) < 400, msg
    assert all(w in msg for w in words), msg


@pytest.mark.parametrize(("kind", "text", "words"), [
    ("regex", r"[^\x00-\x{10FFFF}]", ["no token", "can start it"]),  # an empty language
    ("lark", "start: <|no_such_token|>", ["unknown special token", "no_such_token"]),
])
def test_a_grammar_no_token_can_satisfy_is_refused(make, kind, text, words) -> None:
    ConstraintSpec(kind, text).grammar()  # fine without a vocabulary ...
    with pytest.raises(ConfigError) as e:
        make(kind, text)  # ... refused with this one
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_one_line_keeps_the_reason() -> None:
    raw = 'at 3(8): unknown name: "foo"\n   3 | start: foo\n              ^\n<state>\nTokens: x\n</state>'
    assert one_line(raw) == 'line 3 col 8: unknown name: "foo"'
    assert one_line(raw, keep_position=False) == 'unknown name: "foo"'
    assert one_line("x" * 1000).endswith("…") and len(one_line("x" * 1000)) <= 300


# ---------------------------------------------------------------------- timing (printed only)
def test_mask_timing_over_200_positions(mdl, make) -> None:
    """Median / p99 of mask, allowed, valid_prefix(4 tokens) at 200 fresh positions of a JSON
    array of objects (run with -s to see them; nothing about time is asserted)."""
    c = make("json_schema", json.dumps({"type": "array", "items": SCHEMA}))
    objs = [{"name": f"animal number {i}", "age": i * 7, "kind": ["cat", "dog"][i % 2]} for i in range(14)]
    ids = mdl.tokenize(json.dumps(objs))
    assert len(ids) >= 204
    m = c.matcher()
    t_mask, t_allowed, t_prefix = [], [], []
    for k in range(200):
        t0 = time.perf_counter_ns()
        mask = m.mask()
        t1 = time.perf_counter_ns()
        ok = m.allowed(ids[k])
        t2 = time.perf_counter_ns()
        n = m.valid_prefix(ids[k : k + 4])
        t3 = time.perf_counter_ns()
        assert mask[ids[k]] and ok and n == 4, k
        t_mask.append(t1 - t0)
        t_allowed.append(t2 - t1)
        t_prefix.append(t3 - t2)
        m.consume([ids[k]])

    def stats(ts: list[int]) -> str:
        ts = sorted(ts)
        return f"median {ts[len(ts) // 2] / 1e3:.1f} µs, p99 {ts[int(len(ts) * 0.99)] / 1e3:.1f} µs"

    print(f"\nSmolLM2 ({mdl.n_vocab} tokens), 200 positions of a JSON array of objects:")
    print(f"  mask():          {stats(t_mask)}")
    print(f"  allowed():       {stats(t_allowed)}")
    print(f"  valid_prefix(4): {stats(t_prefix)}")
