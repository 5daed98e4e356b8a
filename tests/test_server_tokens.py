"""What a served prompt becomes (issue 43): long texts tokenized in pieces to the same ids,
and chat_template_kwargs that collide with the renderer's own variables refused on the
Session API as well.

The tokenizer pieces (backend/specials.py) are checked against one llama_tokenize call on
thousands of random mixtures of SmolLM2's special-token texts, whitespace and text; the
cut rule's corner cases (overlapping special texts, tokens that strip whitespace) on a
synthetic vocabulary.
"""

from __future__ import annotations

import random

import pytest

from localspec.backend.chat import RESERVED, ChatTemplate, ChatTemplateError
from localspec.backend.specials import CHUNK_BYTES, Specials
from localspec.config import GenConfig
from localspec.errors import ConfigError, LocalspecError
from tests.support.helpers import model, session

FLOOD = "<|im_start|>user\nx<|im_end|>\n"


# ------------------------------------------------------------------------------ pieces = whole
def test_texts_tokenized_in_pieces_give_the_whole_texts_ids(smollm2_path):
    m = model(smollm2_path)
    specials = m.specials
    atoms = [t.decode() for t in specials.ids] + ["\n", " ", "  ", "x", "user", "é", "\U0001f600", "<", "|",
                                                  ">", "<|im", "_start|>", "\t", "hello world", "123", "<|"]
    rng = random.Random(43)
    for _ in range(600):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 40)))
        data = text.encode()
        for parse_special in (True, False):
            for add_special in (False, True):
                whole = m._raw(data, add_special, parse_special)
                # chunk=1: a cut at every place the rule allows, the hardest test of the rule
                pieces = specials.tokenize(data, m._raw, add_special=add_special, parse_special=parse_special, chunk=1)
                assert pieces == whole, (text, parse_special, add_special)


def test_a_flood_of_role_markers_is_tokenized_in_small_pieces(smollm2_path):
    """One llama_tokenize call is quadratic in the special texts it holds (llama.cpp walks its
    fragment list from the start for each one): no piece may hold more than ~CHUNK_BYTES'
    worth, and the ids are the turns' ids, repeated."""
    m = model(smollm2_path)
    n = 8_000  # 232 KB, 16,000 markers: one call takes ~3 s on 2 cores, the pieces ~0.6 s
    held: list[int] = []

    def raw(data: bytes, add_special: bool, parse_special: bool) -> list[int]:
        held.append(data.count(b"<|im_"))
        return m._raw(data, add_special, parse_special)

    ids = m.specials.tokenize((FLOOD * n).encode(), raw, add_special=False, parse_special=True)
    assert ids == m._raw(FLOOD.encode(), False, True) * n
    assert len(held) > 1 and max(held) <= 2 * (CHUNK_BYTES // len(FLOOD) + 2)
    assert m.tokenize(FLOOD * n) == ids  # Model.tokenize takes the same path for long texts


def test_the_cut_rule_on_a_synthetic_vocabulary():
    sp = Specials({b"<a>": 1, b"a>b": 2, b"<a>c": 3, b"[x]": 4}, set(), strips=False)
    assert sp.occurrences(b"z<a>c<a>") == [(1, 5), (5, 8)]  # the longest text at each place
    data = b"z<a>b[x]"
    occ = sp.occurrences(data)
    assert occ == [(1, 4), (2, 5), (5, 8)]
    assert sp.isolated(data, occ) == [False, False, True]  # <a> and a>b overlap: no cut beside either
    stripping = Specials({b"<a>": 1}, set(), strips=True)
    for data, ok in ((b"z<a>y", True), (b"z <a>y", False), (b"z<a> y", False), (b"<a>", True)):
        assert stripping.isolated(data, stripping.occurrences(data)) == [ok], data


# ------------------------------------------------------------------------------ the template itself
class TemplateOnly:
    """What ChatTemplate reads of a Model: its template and its BOS / EOS."""

    bos = eos = -1

    def __init__(self, source: str) -> None:
        self.source = source

    def chat_template(self) -> str:
        return self.source

    def token_text(self, token: int) -> bytes:
        return b""


LOOP = "{% for m in messages %}[{{ m['role'] }}]{{ CONTENT }}{% endfor %}{% if add_generation_prompt %}[a]{% endif %}"


def test_reserved_template_kwargs_are_refused_on_the_session_api(smollm2_path):
    sess = session(smollm2_path, n_ctx=512)
    msgs = [{"role": "user", "content": "hi"}]
    for key in sorted(RESERVED):
        with pytest.raises(ConfigError, match=repr(key)):  # a TypeError "got multiple values" before
            sess.generate(msgs, GenConfig(method="ar", n_predict=1), template_kwargs={key: "x"})
    sess.close()
    tpl = ChatTemplate(TemplateOnly(LOOP.replace("CONTENT", "m['content']")))
    with pytest.raises(ConfigError, match="'bos_token'"):
        tpl.render(msgs, template_kwargs={"bos_token": "x"})


def test_a_template_that_fails_on_the_input_is_an_input_error():
    tpl = ChatTemplate(TemplateOnly("{% for t in tools %}{{ t }}{% endfor %}{{ raise_exception('no ' + x) }}"))
    with pytest.raises(ChatTemplateError, match="TypeError"):  # 5 is not iterable
        tpl.render([], template_kwargs={"tools": 5})
    with pytest.raises(ChatTemplateError, match="no way") as e:
        tpl.render([], template_kwargs={"tools": [], "x": "way"})
    assert isinstance(e.value, LocalspecError)  # the server answers 400, the CLI one line
