"""`POST /v1/messages` (Anthropic's Messages API) end to end, through the real `anthropic`
SDK against a uvicorn server on the SmolLM2 pair: whole and streamed answers (the SDK
accumulates the events block by block, so a wrong event shape or order fails it), system
prompts, stop sequences, the token limit, count_tokens, the x-api-key header, errors in
Anthropic's shape, provenance, engine failures, and thinking blocks on a tiny thinking model.
The SDK no longer takes `temperature` as an argument: clients send it in the body (extra_body).
"""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from localspec.config import GenConfig
from localspec.server.app import ServerConfig, create_app
from localspec.server.schema import Limits
from tests import test_server, test_thinking
from tests.support.helpers import session
from tests.test_server import KEY, ServerThread

files = test_thinking.files  # the tiny thinking model's fixture

HAIKU = [{"role": "user", "content": "Write a haiku about the sea."}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def srv(smollm2_path, smollm2_q4_0_path):
    """API key on; an engine that can be made to fail (test_server's FlakySession)."""
    sess = test_server.FlakySession(session(smollm2_path, smollm2_q4_0_path, threads=1))
    s = ServerThread(create_app(sess, ServerConfig("smollm2", Limits(test_server.server_cfg(), 2048), api_key=KEY)))
    s.session = sess
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.url, api_key=KEY, max_retries=0, timeout=120)


def events(srv, body: dict, headers: dict | None = None) -> list[tuple[str, dict]]:
    """The raw (event name, data) pairs of a streamed answer."""
    r = httpx.post(srv.url + "/v1/messages", json={**body, "stream": True}, timeout=120,
                   headers=headers or {"x-api-key": KEY})
    return named_events(r)


def named_events(r: httpx.Response) -> list[tuple[str, dict]]:
    """(event, data) of a stream whose events are named (Anthropic's, the Responses API's):
    each name must be its data's `type`."""
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    return parse_named(r.text)


def parse_named(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        out.append((lines["event"], data))
    return out


def anthropic_error(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"} and body["error"]["message"], body
    return body["error"]


# ------------------------------------------------------------------------------ answers
def test_whole_and_streamed_answers_agree(client):
    kw = dict(model="any", max_tokens=24, system="Be brief.", messages=HAIKU, extra_body=GREEDY)
    m = client.messages.create(**kw)
    assert m.id.startswith("msg_") and m.type == "message" and m.role == "assistant" and m.model == "smollm2"
    assert [b.type for b in m.content] == ["text"] and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert m.usage.output_tokens > 0 and m.usage.input_tokens + m.usage.cache_read_input_tokens > 10
    extra = m.model_extra or {}
    assert extra["localspec"]["method"] == "sd" and extra["timings"]["predicted_n"] == m.usage.output_tokens
    with client.messages.stream(**kw) as s:
        texts = list(s.text_stream)
        final = s.get_final_message()
    assert "".join(texts) == final.content[0].text == m.content[0].text  # greedy and lossless: the same answer
    assert final.stop_reason == m.stop_reason and final.usage.output_tokens == m.usage.output_tokens
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == (
        m.usage.input_tokens + m.usage.cache_read_input_tokens)


def test_event_sequence(srv):
    evs = events(srv, {"model": "x", "max_tokens": 8, "messages": HAIKU, **GREEDY})
    names = [n for n, _ in evs]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    start = evs[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["id"].startswith("msg_")
    delta = evs[-2][1]
    assert delta["delta"]["stop_reason"] == "max_tokens" and delta["usage"]["output_tokens"] == 8
    assert delta["localspec"]["stop_reason"] == "max_tokens" and "timings" in delta  # the provenance extension


def test_system_blocks_equal_a_system_string(client):
    kw = dict(model="x", max_tokens=6, messages=HAIKU, extra_body=GREEDY)
    a = client.messages.create(system="Answer in French.", **kw)
    b = client.messages.create(system=[{"type": "text", "text": "Answer in "}, {"type": "text", "text": "French."}], **kw)
    assert a.content[0].text == b.content[0].text
    total = (a.usage.input_tokens + a.usage.cache_read_input_tokens, b.usage.input_tokens + b.usage.cache_read_input_tokens)
    assert total[0] == total[1]
    c = client.messages.create(system="Answer in French, and rhyme.", **kw)
    assert c.usage.input_tokens + c.usage.cache_read_input_tokens > total[0]  # the system prompt reached the model


def test_max_tokens_and_stop_sequences(client, srv):
    short = client.messages.create(model="x", max_tokens=3, messages=HAIKU, extra_body=GREEDY)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 3
    kw = dict(model="x", max_tokens=40, messages=HAIKU, stop_sequences=["zzz", "e"], extra_body=GREEDY)
    m = client.messages.create(**kw)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "e"  # which of the two matched
    assert "e" not in m.content[0].text
    with client.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "e"
    assert final.content[0].text == m.content[0].text


def test_count_tokens_is_the_prompt_a_request_evaluates(client):
    kw = dict(model="x", system="Be brief.", messages=[*HAIKU, {"role": "assistant", "content": "Waves"},
                                                        {"role": "user", "content": [{"type": "text", "text": "More."}]}])
    n = client.messages.count_tokens(**kw).input_tokens
    m = client.messages.create(max_tokens=2, extra_body=GREEDY, **kw)
    assert n == m.usage.input_tokens + m.usage.cache_read_input_tokens and n > 20
    assert client.messages.count_tokens(model="x", messages=HAIKU).input_tokens < n


def test_provenance_rides_along(srv, client):
    m = client.messages.create(model="x", max_tokens=16, messages=HAIKU,
                               extra_body={**GREEDY, "localspec": {"provenance": True}})
    prov = m.model_extra["localspec"]["provenance"]
    assert "".join(s["text"] for s in prov) == m.content[0].text
    assert sum(s["tokens"] for s in prov) == m.usage.output_tokens
    evs = events(srv, {"model": "x", "max_tokens": 16, "messages": HAIKU, **GREEDY, "localspec": {"provenance": True}})
    deltas = [d for n, d in evs if n == "content_block_delta"]
    for d in deltas:
        assert "".join(s["text"] for s in d["localspec"]["provenance"]) == d["delta"]["text"]
    assert "".join(d["delta"]["text"] for d in deltas) == m.content[0].text


# ------------------------------------------------------------------------------ keys and errors
def test_keys_x_api_key_and_bearer(srv):
    body = {"model": "x", "max_tokens": 2, "messages": HAIKU}
    for headers in ({"x-api-key": KEY}, {"Authorization": f"Bearer {KEY}"}):
        assert httpx.post(srv.url + "/v1/messages", json=body, headers=headers, timeout=60).status_code == 200
    bad = anthropic.Anthropic(base_url=srv.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model="x", max_tokens=2, messages=HAIKU)
    r = httpx.post(srv.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 401 and anthropic_error(r)["type"] == "authentication_error"


@pytest.mark.parametrize("body, names", [
    ({"messages": HAIKU}, "max_tokens"),
    ({"max_tokens": 2}, "messages"),
    ({"max_tokens": 2, "messages": []}, "messages"),
    ({"max_tokens": 0, "messages": HAIKU}, "max_tokens"),
    ({"max_tokens": "2", "messages": HAIKU}, "max_tokens"),
    ({"max_tokens": 2, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}, "messages[0].content[0].type"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ({"max_tokens": 2, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"max_tokens": 2, "messages": HAIKU, "stop_sequences": "x"}, "stop_sequences"),
    ({"max_tokens": 2, "messages": HAIKU, "system": [{"type": "image"}]}, "system[0].type"),
    ({"max_tokens": 2, "messages": HAIKU, "tools": [{"type": "web_search_20250305", "name": "s"}]}, "tools[0].type"),
    ({"max_tokens": 2, "messages": HAIKU, "tool_choice": {"type": "some"}}, "tool_choice.type"),
    ({"max_tokens": 2, "messages": HAIKU, "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"max_tokens": 2, "messages": HAIKU, "container": "c"}, "container"),
    ({"max_tokens": 2, "messages": HAIKU, "temperature": -1}, "temperature"),
    ({"max_tokens": 2, "messages": HAIKU, "output_config": {"format": {"type": "json_schema", "schema": {
        "type": "nope"}}}}, "output_config.format"),
])
def test_bad_bodies_are_anthropic_shaped_400s(srv, body, names):
    r = httpx.post(srv.url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
    assert r.status_code == 400, r.text
    err = anthropic_error(r)
    assert err["type"] == "invalid_request_error" and names in err["message"], err


def test_sdk_raises_bad_request(srv, client):
    with pytest.raises(anthropic.BadRequestError, match="text-only"):
        client.messages.create(model="x", max_tokens=2, messages=[{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}])
    r = httpx.post(srv.url + "/v1/messages/count_tokens", json={"messages": 1},
                   headers={"x-api-key": KEY}, timeout=30)
    assert r.status_code == 400 and "messages" in anthropic_error(r)["message"]


def test_engine_failures(srv, client):
    srv.session.fail_next = True
    with pytest.raises(anthropic.InternalServerError):
        client.messages.create(model="x", max_tokens=4, messages=HAIKU)
    srv.session.fail_mid = True
    evs = events(srv, {"model": "x", "max_tokens": 8, "messages": HAIKU})
    assert evs[-1][0] == "error" and evs[-1][1]["error"]["type"] == "api_error"
    assert "simulated failure" in evs[-1][1]["error"]["message"]
    assert client.messages.create(model="x", max_tokens=2, messages=HAIKU).usage.output_tokens == 2  # still serving
    text = httpx.get(srv.url + "/metrics", headers={"x-api-key": KEY}).text  # counted as their own endpoint
    assert 'endpoint="messages",code="500"} 1' in text and 'endpoint="messages",code="200"}' in text


def test_tool_history_and_tools_on_a_template_without_them(srv, client):
    """SmolLM2's template renders no tools: `tools` is a clear 400 (the chat route's), while a
    history with tool_use / tool_result blocks still renders and is answered."""
    tools = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    with pytest.raises(anthropic.BadRequestError, match="render"):
        client.messages.create(model="x", max_tokens=2, messages=HAIKU, tools=tools)
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                                 {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "cold", "is_error": False},
                                            {"type": "text", "text": "Summarize."}]}]
    m = client.messages.create(model="x", max_tokens=2, messages=history, tools=tools, tool_choice={"type": "none"})
    assert m.usage.output_tokens == 2
    n = client.messages.count_tokens(model="x", messages=history).input_tokens
    shorter = client.messages.count_tokens(model="x", messages=history[:1]).input_tokens
    assert n > shorter + 10  # the call and its result reached the prompt


def test_structured_output_config(client):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    m = client.messages.create(model="x", max_tokens=24, messages=[{"role": "user", "content": "Pick a number."}],
                               output_config={"format": {"type": "json_schema", "schema": schema}}, extra_body=GREEDY)
    assert isinstance(json.loads(m.content[0].text)["n"], int)


# ------------------------------------------------------------------------------ thinking
def test_thinking_blocks_and_reasoning_items_on_a_thinking_model(files):  # noqa: F811
    app = create_app(session(files.r1, files.draft),
                     ServerConfig(model_id="tiny", limits=Limits(cfg=GenConfig(method="sd", L=4, n_predict=16), n_ctx=2048)))
    s = ServerThread(app)
    try:
        c = anthropic.Anthropic(base_url=s.url, api_key="x", max_retries=0, timeout=60)
        kw = dict(model="tiny", max_tokens=16, messages=[{"role": "user", "content": "hi"}],
                  thinking={"type": "enabled", "budget_tokens": 5}, extra_body=GREEDY)
        m = c.messages.create(**kw)
        assert [b.type for b in m.content] == ["thinking", "text"], m.content
        thought, answer = m.content[0].thinking, m.content[1].text
        assert thought and answer and "</think>" not in thought + answer and m.content[0].signature == ""
        with c.messages.stream(**kw) as st:
            final = st.get_final_message()
        assert [b.type for b in final.content] == ["thinking", "text"]
        assert final.content[0].thinking == thought and final.content[1].text == answer
        # the reasoning sent back in a later turn is dropped, as on the chat route: same prompt either way
        turn = {"role": "assistant", "content": [{"type": "thinking", "thinking": thought, "signature": ""},
                                                 {"type": "text", "text": answer}]}
        follow = [{"role": "user", "content": "hi"}, turn, {"role": "user", "content": "more"}]
        plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": answer}, {"role": "user", "content": "more"}]
        assert c.messages.count_tokens(model="t", messages=follow).input_tokens == \
            c.messages.count_tokens(model="t", messages=plain).input_tokens
        # the Responses API on the same server: a reasoning item, then the message
        oc = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=60)
        rkw = dict(model="tiny", input="hi", max_output_tokens=16, temperature=0, extra_body={"reasoning_budget": 5})
        r = oc.responses.create(**rkw)
        assert [o.type for o in r.output] == ["reasoning", "message"]
        assert r.output[0].content[0].text == thought and r.output_text == answer
        evs = list(oc.responses.create(**rkw, stream=True))  # random weights: it ends at the token limit
        assert "".join(e.delta for e in evs if e.type == "response.reasoning_text.delta") == thought
        assert evs[-1].type == "response.incomplete" and evs[-1].response.output_text == answer
    finally:
        s.stop()


# ------------------------------------------------------------------------------ scripted chat chunks
# What the chat route streams for an answer with reasoning, text and two tool calls (the
# shapes of server/stream.py and the tool-call deltas), translated without a model and
# accumulated by the SDKs' own stream code: the Messages (here) and Responses
# (test_server_responses.py) translations of tool calls, checked on every block kind.
def _chunk(delta: dict | None = None, finish: str | None = None, **more) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", "choices": choices, **more}


def _call(index: int, call_id: str | None = None, name: str | None = None, arguments: str = "") -> dict:
    tc: dict = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        tc.update(id=call_id, type="function")
        tc["function"]["name"] = name
    return {"tool_calls": [tc]}


USAGE = {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42, "prompt_tokens_details": {"cached_tokens": 4}}
INFO = {"method": "sd", "stop_reason": "eog"}
CHAT_CHUNKS = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"reasoning_content": "Weather "}), _chunk({"reasoning_content": "and time."}),
    _chunk({"content": "Checking."}, localspec={"provenance": [{"kind": "draft", "text": "Checking.", "tokens": 2}]}),
    _chunk(_call(0, "call_a", "get_weather")), _chunk(_call(0, arguments='{"city": ')), _chunk(_call(0, arguments='"Paris"}')),
    _chunk(_call(1, "call_b", "get_time", '{"zone": "CET"}')),
    _chunk({}, "tool_calls"),
    _chunk(None, usage=USAGE, timings={"predicted_n": 12}, localspec=INFO),
]
CHAT_BODY = {"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "usage": USAGE, "timings": {}, "localspec": INFO,
             "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                 "role": "assistant", "content": "Checking.", "reasoning_content": "Weather and time.",
                 "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get_weather",
                                                                                  "arguments": '{"city": "Paris"}'}},
                                {"id": "call_b", "type": "function", "function": {"name": "get_time",
                                                                                  "arguments": '{"zone": "CET"}'}}]}}]}


def translated(translator, chunks: list[dict]) -> list[tuple[str, dict]]:
    """The named events a translator makes of chat chunks (then its end)."""
    return parse_named("".join(line for c in chunks for line in translator.chunk(c)) + "".join(translator.end()))


def test_tool_calls_thinking_and_text_translate_to_blocks():
    from anthropic.lib.streaming._messages import accumulate_event

    from localspec.server.anthropic_out import ToMessages
    from localspec.server.schema import GenRequest

    req = GenRequest("chat", [], GenConfig())
    evs = translated(ToMessages(req, "m"), CHAT_CHUNKS)
    snapshot, bufs = None, {}
    for _, data in evs:
        if data["type"] != "ping":
            snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=bufs)
    want = [("thinking", "Weather and time."), ("text", "Checking."), ("tool_use", ("call_a", "get_weather", {"city": "Paris"})),
            ("tool_use", ("call_b", "get_time", {"zone": "CET"}))]
    whole = anthropic.types.Message.model_validate(ToMessages(req, "m").response(CHAT_BODY))
    for message in (snapshot, whole):
        got = [(b.type, b.thinking if b.type == "thinking" else b.text if b.type == "text" else (b.id, b.name, b.input))
               for b in message.content]
        assert got == want
        assert message.stop_reason == "tool_use" and message.usage.input_tokens == 26
        assert message.usage.cache_read_input_tokens == 4 and message.usage.output_tokens == 12
    starts = [d["index"] for n, d in evs if n == "content_block_start"]
    stops = [d["index"] for n, d in evs if n == "content_block_stop"]
    assert starts == stops == [0, 1, 2, 3]  # each block closed before the next opens
    text_delta = next(d for n, d in evs if n == "content_block_delta" and d["delta"]["type"] == "text_delta")
    assert text_delta["localspec"]["provenance"][0]["text"] == "Checking."


@pytest.mark.parametrize("special", [True, False])
def test_count_prompt_is_what_generate_evaluates(smollm2_path, special):
    """Session.count_prompt (count_tokens' engine side) against the prompt generate() built,
    with message text tokenized as text (--no-special-in-content) or not, and a prefill."""
    s = session(smollm2_path, threads=1)
    s.special_in_content = special
    msgs = [{"role": "system", "content": "Be brief <|im_start|>"}, *HAIKU]
    for prefill in ("", "Waves"):
        s.reset()  # a fresh context: no reuse of the previous answer's tokens
        list(s.generate(msgs, GenConfig(method="ar", n_predict=1), prefill=prefill))
        assert s.count_prompt(msgs, prefill=prefill) == len(s.last_prompt_tokens)
    plain, special_ = s.count_prompt(msgs), session(smollm2_path, threads=1).count_prompt(msgs)
    assert (plain == special_) == special  # the marker in the text is one token only when special


# ------------------------------------------------------------------------------ tools (a model that renders them)
WEATHER_SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}
ASK = [{"role": "user", "content": "What's the weather in Paris right now?"}]


@pytest.fixture(scope="module")
def qsrv(qwen_draft_path):
    """Qwen2.5-Coder-0.5B as the target (its template renders tools; SmolLM2's renders none),
    greedy plain decoding: seconds per request on 2 cores."""
    from localspec.config import SamplingConfig

    cfg = GenConfig(method="ar", n_predict=80, sampling=SamplingConfig(temp=0.0))
    s = ServerThread(create_app(session(qwen_draft_path, n_ctx=4096, threads=2), ServerConfig("qwen", Limits(cfg, 4096))))
    yield s
    s.stop()


@pytest.mark.slow
def test_tool_use_round_trip(qsrv):
    import jsonschema

    c = anthropic.Anthropic(base_url=qsrv.url, api_key="x", max_retries=0, timeout=300)
    tools = [{"name": "get_weather", "description": "Current weather in a city", "input_schema": WEATHER_SCHEMA}]
    kw = dict(model="qwen", max_tokens=120, messages=ASK, tools=tools, tool_choice={"type": "tool", "name": "get_weather"})
    m = c.messages.create(**kw)
    calls = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(calls[0].input, WEATHER_SCHEMA)
    assert calls[0].input["city"].lower().startswith("paris")
    with c.messages.stream(**kw) as st:
        final = st.get_final_message()
    assert final.stop_reason == "tool_use" and [b.input for b in final.content if b.type == "tool_use"] == [calls[0].input]
    # the result goes back as a tool_result block; "none": the 0.5B model, left to choose, calls again
    history = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                             "content": [{"type": "text", "text": '{"temp_c": 21, "sky": "sunny"}'}]}]}]
    r = c.messages.create(model="qwen", max_tokens=60, messages=history, tools=tools, tool_choice={"type": "none"})
    assert r.stop_reason == "end_turn" and [b.type for b in r.content] == ["text"]
    assert "21" in r.content[0].text or "sunny" in r.content[0].text.lower()
    # count_tokens renders the tools too
    with_tools = c.messages.count_tokens(model="qwen", messages=ASK, tools=tools).input_tokens
    assert with_tools > c.messages.count_tokens(model="qwen", messages=ASK).input_tokens + 30
