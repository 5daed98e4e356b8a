"""What a served prompt becomes (issue 43): chat_template_kwargs that collide with the
renderer's own variables are refused on the Session API as well as by the server, and a
template that fails on a request's input is an input error.
"""

from __future__ import annotations

import pytest

from localspec.backend.chat import RESERVED, ChatTemplate, ChatTemplateError
from localspec.config import GenConfig
from localspec.errors import ConfigError, LocalspecError
from tests.support.helpers import session


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
