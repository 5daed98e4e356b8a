"""Tool calls through the real `openai` SDK (and openai-agents, instructor) against a real
server on Qwen2.5-Coder-0.5B-Instruct, whose own chat template renders tools and asks for
`<tool_call>{json}</tool_call>`; SmolLM2's template renders none (a clear 400)."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.server.app import ServerConfig, create_app
from localspec.server.schema import Limits
from tests.support.agents_run import run_weather_agent
from tests.support.helpers import session
from tests.test_server import ServerThread

slow = pytest.mark.slow  # each request decodes on the 0.5B model: tens of seconds on 2 cores

WEATHER_PARAMS = {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": WEATHER_PARAMS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone",
                                         "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                                                        "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What's the weather in Paris right now?"}]


@pytest.fixture(scope="module")
def qsrv(qwen_draft_path):
    """Qwen2.5-Coder-0.5B as target (its template renders tools), greedy, plain decoding."""
    cfg = GenConfig(method="ar", n_predict=80, sampling=SamplingConfig(temp=0.0))
    config = ServerConfig(model_id="qwen", limits=Limits(cfg=cfg, n_ctx=4096))
    s = ServerThread(create_app(session(qwen_draft_path, n_ctx=4096, threads=2), config))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ssrv(smollm2_path):
    """SmolLM2: its template renders no tools; fields are checked before that is (fast tier)."""
    config = ServerConfig(model_id="smollm2", limits=Limits(cfg=GenConfig(method="ar", n_predict=4), n_ctx=1024))
    s = ServerThread(create_app(session(smollm2_path, n_ctx=1024), config))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(qsrv) -> openai.OpenAI:
    return openai.OpenAI(base_url=qsrv.url + "/v1", api_key="x", max_retries=0, timeout=300)


def valid_call(call, schema=WEATHER_PARAMS) -> dict:
    assert call.type == "function" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)  # a JSON *string*
    jsonschema.validate(args, schema)
    return args


@slow
def test_required_gives_a_schema_valid_call(client):
    r = client.chat.completions.create(model="qwen", messages=ASK, tools=[WEATHER, TIME], tool_choice="required")
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.tool_calls
    call = ch.message.tool_calls[0]
    assert call.function.name in ("get_weather", "get_time")
    if call.function.name == "get_weather":
        assert valid_call(call)["city"].lower().startswith("paris")


@slow
def test_named_function_streamed_as_tool_call_deltas(client):
    stream = client.chat.completions.create(model="qwen", messages=ASK, tools=[TIME, WEATHER], stream=True,
                                            tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls: dict[int, dict] = {}
    finish = None
    content = ""
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            if tc.function:
                c["name"] += tc.function.name or ""
                c["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and list(calls) == [0] and "<tool_call>" not in content
    c = calls[0]
    assert c["name"] == "get_weather" and c["id"].startswith("call_")
    jsonschema.validate(json.loads(c["arguments"]), WEATHER_PARAMS)


@slow
def test_auto_calls_and_none_does_not(client):
    r = client.chat.completions.create(model="qwen", messages=ASK, tools=[WEATHER])
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.tool_calls[0].function.name == "get_weather"
    json.loads(ch.message.tool_calls[0].function.arguments)
    r = client.chat.completions.create(model="qwen", messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=30)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason != "tool_calls"
    assert r.choices[0].message.content


@slow
def test_a_tool_round_trip_ends_in_an_answer(client):
    first = client.chat.completions.create(model="qwen", messages=ASK, tools=[WEATHER], tool_choice="required")
    call = first.choices[0].message.tool_calls[0]
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
               {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 21, "sky": "sunny"})}]
    # the history (a call with null content, the tool's result) renders through the template
    # (the answer quotes the result);
    # "none": the 0.5B model, left to choose, calls the tool again rather than answering
    r = client.chat.completions.create(model="qwen", messages=history, tools=[WEATHER], tool_choice="none",
                                       max_tokens=60)
    ch = r.choices[0]
    assert ch.finish_reason == "stop" and ch.message.tool_calls is None
    assert "21" in ch.message.content or "sunny" in ch.message.content.lower()


@pytest.mark.parametrize("extra, param", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]},
     "tools[0].function.parameters"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"messages": [*ASK, {"role": "tool", "content": "21C"}]}, "messages[1].tool_call_id"),
    ({"messages": [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
    ({"functions": [WEATHER["function"]], "tools": [WEATHER]}, "functions"),
])
def test_bad_tool_requests_are_400_naming_the_field(ssrv, extra, param):
    body = {"messages": ASK, "max_tokens": 4, **extra}
    r = httpx.post(ssrv.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"
    completions = httpx.post(ssrv.url + "/v1/completions", json={"prompt": "x", "tools": [WEATHER]}, timeout=60)
    assert completions.status_code == 400 and completions.json()["error"]["param"] == "tools"


@slow
def test_a_call_and_a_response_format_together_are_400(qsrv):
    body = {"messages": ASK, "tools": [WEATHER], "response_format": {"type": "json_object"}}
    r = httpx.post(qsrv.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    body["tool_choice"] = "none"  # then the format alone holds the answer
    body["max_tokens"] = 8
    assert httpx.post(qsrv.url + "/v1/chat/completions", json=body, timeout=300).status_code == 200


@slow
def test_legacy_functions_map_to_a_function_call(qsrv):
    body = {"messages": ASK, "functions": [WEATHER["function"]], "function_call": {"name": "get_weather"}}
    r = httpx.post(qsrv.url + "/v1/chat/completions", json=body, timeout=300).json()
    ch = r["choices"][0]
    assert ch["finish_reason"] == "function_call" and ch["message"]["function_call"]["name"] == "get_weather"
    jsonschema.validate(json.loads(ch["message"]["function_call"]["arguments"]), WEATHER_PARAMS)


def test_a_template_without_tools_is_a_clear_400(ssrv):
    r = httpx.post(ssrv.url + "/v1/chat/completions", json={"messages": ASK, "tools": [WEATHER]}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
    assert "does not render tools" in r.json()["error"]["message"]
    ok = httpx.post(ssrv.url + "/v1/chat/completions", timeout=60,
                    json={"messages": ASK, "tools": [WEATHER], "tool_choice": "none", "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"].get("tool_calls") is None
    # tool-call history renders on any template (SmolLM2's prints the tool result as a turn)
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21C"}]
    r = httpx.post(ssrv.url + "/v1/chat/completions", json={"messages": history, "max_tokens": 2}, timeout=60)
    assert r.status_code == 200, r.text


@slow
def test_openai_agents_runs_a_function_tool(qsrv):
    """An agent framework (openai-agents, its chat-completions model class) runs a function tool."""
    seen, result = run_weather_agent(qsrv.url, "OpenAIChatCompletionsModel")
    assert seen and "paris" in seen[0].lower()
    assert result.final_output


@slow
def test_instructor_tools_and_json_schema_modes(qsrv):
    import instructor  # dev extra
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    base = openai.OpenAI(base_url=qsrv.url + "/v1", api_key="x", max_retries=0, timeout=300)
    for mode in (instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA):
        client = instructor.from_openai(base, mode=mode)
        city = client.chat.completions.create(model="qwen", response_model=City, max_retries=0,
                                              messages=[{"role": "user", "content": "Paris is in France. Extract the city."}])
        assert isinstance(city, City) and city.name
