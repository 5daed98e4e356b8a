"""Log-probabilities through the real `openai` SDK against a real server on SmolLM2.

Chat's `logprobs` / `top_logprobs` (whole and streamed), the legacy completions shape, and
lm-eval's `local-completions` log-likelihood request (echo + logprobs + max_tokens 0) whose
continuation score must equal one computed directly with llama-cpp-python (logits_all).
Bad values are OpenAI-shaped 400s naming the field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openai
import pytest

from localspec.config import GenConfig
from localspec.server.app import ServerConfig, create_app
from localspec.server.schema import Limits
from tests.support.helpers import session
from tests.test_server import ServerThread, error_of, post, sdk_client

TOL = 2e-3  # nats: batch-shape numerics (a verify pass vs one token, a chunk vs the whole prompt)
ASK = [{"role": "user", "content": "Name three colours, comma separated."}]
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


@pytest.fixture(scope="module")
def srv(smollm2_path: Path, smollm2_q4_0_path: Path):
    config = ServerConfig(model_id="smollm2", draft="smollm2-q4_0",
                          limits=Limits(cfg=GenConfig(method="sd", K=1, L=4, n_predict=16), n_ctx=2048))
    s = ServerThread(create_app(session(smollm2_path, smollm2_q4_0_path, n_ctx=2048, threads=1), config))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv) -> openai.OpenAI:
    return sdk_client(srv)


def chat(client, method: str = "sd", extra_body: dict | None = None, **kw):
    return client.chat.completions.create(model="smollm2", messages=ASK, max_tokens=12, temperature=0,
                                          extra_body={"speculative": {"method": method}, **(extra_body or {})}, **kw)


def test_chat_logprobs_are_ars_and_well_formed(client):
    sd = chat(client, logprobs=True, top_logprobs=2)
    ar = chat(client, "ar", logprobs=True, top_logprobs=2)
    content = sd.choices[0].logprobs.content
    assert len(content) == sd.usage.completion_tokens > 3
    assert b"".join(bytes(e.bytes) for e in content).decode() == sd.choices[0].message.content
    for e, w in zip(content, ar.choices[0].logprobs.content, strict=True):
        assert e.token == w.token and e.logprob == pytest.approx(w.logprob, abs=TOL)
        assert e.logprob <= 0 and len(e.top_logprobs) == 2
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob  # greedy
        assert e.top_logprobs[1].logprob <= e.top_logprobs[0].logprob
    plain = chat(client)
    assert plain.choices[0].logprobs is None and plain.choices[0].message.content == sd.choices[0].message.content


def test_chat_stream_carries_each_chunks_logprobs(client):
    whole = chat(client, logprobs=True, top_logprobs=1).choices[0].logprobs.content
    got, text = [], ""
    for chunk in chat(client, logprobs=True, top_logprobs=1, stream=True):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        if ch.delta.content:
            text += ch.delta.content
            assert ch.logprobs is not None and ch.logprobs.content  # a chunk's text comes with its tokens
        if ch.logprobs is not None:
            got += ch.logprobs.content
    assert [e.token for e in got] == [e.token for e in whole]
    assert [e.logprob for e in got] == pytest.approx([e.logprob for e in whole], abs=TOL)
    assert "".join(e.token for e in got) == text


def test_n_probs_is_llama_servers_name(client):
    r = chat(client, extra_body={"n_probs": 3})
    assert all(len(e.top_logprobs) == 3 for e in r.choices[0].logprobs.content)


def test_completions_legacy_shape(client):
    r = client.completions.create(model="smollm2", prompt="One, two, three,", max_tokens=8, temperature=0, logprobs=2)
    ch = r.choices[0]
    lp = ch.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == r.usage.completion_tokens
    assert "".join(lp.tokens) == ch.text
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    for tok, p, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert p <= 0 and top[tok] == p and max(top.values()) == p  # greedy: the chosen is the top one
        assert 2 <= len(top) <= 3


def direct_logprobs(llm, tokens: list[int]) -> list[float]:
    """log p(tokens[i] | tokens[:i]) for i >= 1, through llama-cpp-python's own Llama (logits_all)."""
    llm.reset()
    llm.eval(tokens)
    scores = np.asarray(llm.scores[: len(tokens)], dtype=np.float64)
    out = []
    for i in range(1, len(tokens)):
        row = scores[i - 1]
        m = row.max()
        out.append(float(row[tokens[i]] - (m + np.log(np.exp(row - m).sum()))))
    return out


def test_lm_eval_loglikelihood_request(srv, smollm2_path):
    """lm-eval's local-completions: prompt = context + continuation (token ids), echo, logprobs 1,
    max_tokens 0, temperature 0; it sums token_logprobs over the continuation."""
    import llama_cpp

    # flash attention as the server's contexts run it on this CPU (-fa auto: on); its numbers
    # differ from the unfused path's by ~0.1 nat on this model
    llm = llama_cpp.Llama(model_path=str(smollm2_path), logits_all=True, n_ctx=128, n_batch=128, flash_attn=True,
                          verbose=False)
    context = llm.tokenize(b"Question: What is the capital of France?\nAnswer:", add_bos=True)
    want: dict[tuple[int, ...], list[float]] = {}
    # max_tokens 0 as the brief's request; 1 as lm-eval sends it now (it drops the last entry)
    for cont, max_tokens in ((b" Paris", 0), (b" Lyon, probably", 0), (b" Lyon, probably", 1)):
        cont_ids = llm.tokenize(cont, add_bos=False, special=False)
        body = {"model": "smollm2", "prompt": [context + cont_ids], "temperature": 0, "max_tokens": max_tokens,
                "logprobs": 1, "seed": 1234, "echo": True}
        r = post(srv, COMPLETIONS, body, key=None)
        assert r.status_code == 200, r.text
        ch = r.json()["choices"][0]
        lp = ch["logprobs"]
        n = len(context) + len(cont_ids)
        assert len(lp["token_logprobs"]) == n + max_tokens and lp["token_logprobs"][0] is None
        assert r.json()["usage"]["completion_tokens"] == max_tokens
        assert ch["text"].startswith(llm.detokenize(context + cont_ids).decode())
        got = sum(lp["token_logprobs"][len(context):n])
        key = tuple(context + cont_ids)
        want[key] = want.get(key) or direct_logprobs(llm, list(key))
        assert got == pytest.approx(sum(want[key][len(context) - 1:]), abs=1e-3)
        for t, top in zip(lp["token_logprobs"][len(context):n], lp["top_logprobs"][len(context):n], strict=True):
            assert t in top.values() and t <= max(top.values())  # lm-eval's is_greedy reads these
    llm.close()


def test_echo_text_prompt_and_stream(client):
    prompt = "Once upon a time"
    whole = client.completions.create(model="smollm2", prompt=prompt, max_tokens=4, temperature=0, logprobs=0, echo=True)
    ch = whole.choices[0]
    assert ch.text.startswith(prompt) and ch.logprobs.token_logprobs[0] is None
    n_prompt = whole.usage.prompt_tokens
    assert len(ch.logprobs.tokens) == n_prompt + whole.usage.completion_tokens
    text, lps = "", []
    for chunk in client.completions.create(model="smollm2", prompt=prompt, max_tokens=4, temperature=0, logprobs=0,
                                           echo=True, stream=True):
        if chunk.choices:
            text += chunk.choices[0].text
            if chunk.choices[0].logprobs is not None:
                lps += chunk.choices[0].logprobs.token_logprobs
    assert text == ch.text
    assert lps[0] is None and lps[1:] == pytest.approx(ch.logprobs.token_logprobs[1:], abs=TOL)
    plain = client.completions.create(model="smollm2", prompt=prompt, max_tokens=4, temperature=0, echo=True)
    assert plain.choices[0].text == ch.text and plain.choices[0].logprobs is None


@pytest.mark.parametrize("path, extra, param, code", [
    (CHAT, {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "invalid_value"),
    (CHAT, {"top_logprobs": 2}, "top_logprobs", "invalid_value"),
    (CHAT, {"logprobs": "yes"}, "logprobs", "invalid_type"),
    (CHAT, {"echo": True}, "echo", "unsupported_parameter"),
    (CHAT, {"logprobs": True, "top_logprobs": 2, "n_probs": 3}, "n_probs", "invalid_value"),
    (CHAT, {"logprobs": True, "speculative": {"method": "parse"}}, "logprobs", "unsupported_value"),
    (COMPLETIONS, {"logprobs": 21}, "logprobs", "invalid_value"),
    (COMPLETIONS, {"logprobs": -1}, "logprobs", "invalid_value"),
    (COMPLETIONS, {"logprobs": True}, "logprobs", "invalid_type"),
    (COMPLETIONS, {"max_tokens": 0}, "max_tokens", "invalid_value"),
    (COMPLETIONS, {"top_logprobs": 2}, "top_logprobs", "unsupported_parameter"),
    (COMPLETIONS, {"echo": 1}, "echo", "invalid_type"),
])
def test_bad_values_are_400s_naming_the_field(srv, path, extra, param, code):
    body = {"messages": ASK} if path == CHAT else {"prompt": "hi"}
    r = post(srv, path, {**body, "max_tokens": 2, **extra}, key=None)
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert err["param"] == param and err["code"] == code, err
