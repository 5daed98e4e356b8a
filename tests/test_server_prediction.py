"""OpenAI's `prediction` (Predicted Outputs) through the real `openai` SDK on SmolLM2: the
answer is the one without a prediction, token for token; a right prediction is drafted and
kept (usage.completion_tokens_details says how much); a wrong shape is a 400 naming the field."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from localspec.config import GenConfig
from localspec.server.app import ServerConfig, create_app
from localspec.server.schema import Limits
from tests.support.helpers import session
from tests.test_server import ServerThread, error_of, post, sdk_client

ASK = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


@pytest.fixture(scope="module")
def srv(smollm2_path: Path):
    config = ServerConfig(model_id="smollm2", limits=Limits(cfg=GenConfig(method="auto", n_predict=48), n_ctx=2048))
    s = ServerThread(create_app(session(smollm2_path, None, n_ctx=2048, threads=1), config))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv) -> openai.OpenAI:
    return sdk_client(srv)


def chat(client: openai.OpenAI, **kw):
    return client.chat.completions.create(model="smollm2", messages=ASK, max_tokens=48, temperature=0, **kw)


def test_a_prediction_drafts_and_never_changes_the_answer(client) -> None:
    plain = chat(client)
    text = plain.choices[0].message.content
    assert plain.usage.completion_tokens_details is None  # no prediction: no prediction counts
    right = chat(client, prediction={"type": "content", "content": text})
    assert right.choices[0].message.content == text
    d = right.usage.completion_tokens_details
    assert d.accepted_prediction_tokens > 0.5 * right.usage.completion_tokens and d.rejected_prediction_tokens <= 8
    parts = chat(client, prediction={"type": "content", "content": [{"type": "text", "text": text[:20]},
                                                                     {"type": "text", "text": text[20:]}]})
    assert parts.choices[0].message.content == text
    wrong = chat(client, prediction={"type": "content", "content": "SELECT * FROM t; " * 10})
    assert wrong.choices[0].message.content == text


def test_a_streamed_answer_with_a_prediction_is_the_same(client) -> None:
    text = chat(client).choices[0].message.content
    got = "".join(c.choices[0].delta.content or "" for c in
                  chat(client, stream=True, prediction={"type": "content", "content": text}) if c.choices)
    assert got == text


@pytest.mark.parametrize("prediction, param", [
    ({"type": "text", "content": "x"}, "prediction"),
    ("x", "prediction"),
    ({"type": "content", "content": 3}, "prediction.content"),
    ({"type": "content", "content": [{"type": "image", "url": "x"}]}, "prediction.content"),
])
def test_a_malformed_prediction_is_a_400_naming_it(srv, prediction, param) -> None:
    r = post(srv, "/v1/chat/completions", {"messages": ASK, "max_tokens": 2, "prediction": prediction}, key=None)
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param


def test_completions_take_a_prediction_too(client) -> None:
    kw = {"model": "smollm2", "prompt": "def add(a, b):\n", "max_tokens": 24, "temperature": 0}
    text = client.completions.create(**kw).choices[0].text
    got = client.completions.create(**kw, extra_body={"prediction": {"type": "content", "content": text}})
    assert got.choices[0].text == text
    assert got.usage.completion_tokens_details.accepted_prediction_tokens > 0
