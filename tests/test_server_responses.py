"""`POST /v1/responses` (OpenAI's Responses API) end to end, through the real `openai` SDK's
`client.responses` against a uvicorn server on the SmolLM2 pair: whole and streamed answers
(the SDK's stream helper accumulates the events by output and content index, so a wrong
event shape or order fails it), instructions and input items, the token limit (status
"incomplete"), a JSON schema through text.format, refusals of what is not built, and
engine failures inside a stream.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests import test_server, test_server_messages
from tests.support.agents_run import run_weather_agent
from tests.support.helpers import session
from tests.test_server import KEY, ServerThread, error_of, sdk_client
from tests.test_server_messages import named_events

HAIKU = "Write a haiku about the sea."
SKY = "Answer with one word: what colour is the sky on a clear day?"


@pytest.fixture(scope="module")
def srv(smollm2_path, smollm2_q4_0_path):
    """API key on; an engine that can be made to fail (test_server's FlakySession)."""
    from localspec.server.app import ServerConfig, create_app
    from localspec.server.schema import Limits

    sess = test_server.FlakySession(session(smollm2_path, smollm2_q4_0_path, threads=1))
    app = create_app(sess, ServerConfig("smollm2", Limits(test_server.server_cfg(), 2048), api_key=KEY))
    s = ServerThread(app)
    s.session = sess
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv) -> openai.OpenAI:
    return sdk_client(srv, KEY)


def raw_events(srv, body: dict) -> list[dict]:
    r = httpx.post(srv.url + "/v1/responses", json={**body, "stream": True}, timeout=120,
                   headers={"Authorization": f"Bearer {KEY}"})
    return [data for _, data in named_events(r)]


# ------------------------------------------------------------------------------ answers
def test_whole_and_streamed_answers_agree(client):
    # a question SmolLM2 answers in one short sentence: its greedy haiku ended inside 24 tokens
    # on the AVX-512 VMs and ran on past 48 on an AVX2-only EPYC (float rounding moves a
    # near-tie), and the SDK's stream helper wants a completed response
    kw = dict(model="any", instructions="Be brief.", input=SKY, temperature=0, max_output_tokens=40)
    r = client.responses.create(**kw)
    assert r.id.startswith("resp_") and r.object == "response" and r.model == "smollm2"
    assert r.status == "completed" and r.incomplete_details is None and r.usage.output_tokens < 40
    assert r.instructions == "Be brief." and r.temperature == 0
    assert [o.type for o in r.output] == ["message"] and r.output_text
    assert r.usage.output_tokens > 0 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert (r.model_extra or {})["localspec"]["method"] == "sd" and "timings" in r.model_extra
    with client.responses.stream(**kw) as s:
        deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()
    assert "".join(deltas) == r.output_text  # greedy and lossless: the same answer
    assert final.output_text == r.output_text and final.usage.output_tokens == r.usage.output_tokens
    events = list(client.responses.create(**kw, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.output_text == r.output_text


def test_event_sequence(srv):
    evs = raw_events(srv, {"input": HAIKU, "max_output_tokens": 6, "temperature": 0})
    names = [e["type"] for e in evs]
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert names[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert set(names[4:-4]) == {"response.output_text.delta"}
    last = evs[-1]["response"]
    assert last["status"] == "incomplete" and last["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["usage"]["output_tokens"] == 6 and last["localspec"]["stop_reason"] == "max_tokens"
    item = evs[-2]["item"]
    assert item["status"] == "completed" and item["content"][0]["text"] == evs[-4]["text"]


def test_input_items_and_a_conversation(client):
    items = [{"role": "developer", "content": "Be brief."},
             {"role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Blue."}]},
             {"role": "user", "content": "Another one?"}]
    r = client.responses.create(model="x", input=items, temperature=0, max_output_tokens=8)
    again = client.responses.create(model="x", input=items, temperature=0, max_output_tokens=8)
    assert r.output_text == again.output_text
    shorter = client.responses.create(model="x", input=items[:2], temperature=0, max_output_tokens=8)
    assert shorter.usage.input_tokens < r.usage.input_tokens  # the whole conversation reached the model


def test_function_call_history_on_a_template_without_tools(client):
    """SmolLM2 renders no tools (function tools are a 400), but a history of function_call and
    function_call_output items renders and is answered."""
    with pytest.raises(openai.BadRequestError, match="render"):
        client.responses.create(model="x", input=HAIKU, tools=[{"type": "function", "name": "f", "parameters": {}}])
    items = [{"role": "user", "content": "Weather in Oslo?"},
             {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
             {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Bergen"}'},
             {"type": "function_call_output", "call_id": "c1", "output": "cold"},
             {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "wet"}]},
             {"type": "reasoning", "id": "rs_1", "summary": []}]
    r = client.responses.create(model="x", input=items, max_output_tokens=2, temperature=0)
    assert [o.type for o in r.output] == ["message"]  # an answer (SmolLM2 may end it at once)
    shorter = client.responses.create(model="x", input=items[:1], max_output_tokens=2, temperature=0)
    assert r.usage.input_tokens > shorter.usage.input_tokens + 10  # the calls and results reached the prompt


def test_json_schema_through_text_format(client):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    r = client.responses.create(model="x", input="Pick a number.", temperature=0, max_output_tokens=24,
                                text={"format": {"type": "json_schema", "name": "pick", "schema": schema, "strict": True}})
    assert isinstance(json.loads(r.output_text)["n"], int)


# ------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("body, param", [
    ({}, "input"),
    ({"input": []}, "input"),
    ({"input": 5}, "input"),
    ({"input": HAIKU, "previous_response_id": "resp_1"}, "previous_response_id"),
    ({"input": HAIKU, "conversation": "conv_1"}, "conversation"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": HAIKU, "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": HAIKU, "tool_choice": "sometimes"}, "tool_choice"),
    ({"input": HAIKU, "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": HAIKU, "text": {"format": {"type": "json_schema", "schema": {"type": "nope"}}}}, "text.format"),
    ({"input": HAIKU, "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"input": HAIKU, "background": True}, "background"),
    ({"input": HAIKU, "frobnicate": 1}, "frobnicate"),
])
def test_bad_bodies_are_openai_shaped_400s(srv, body, param):
    r = httpx.post(srv.url + "/v1/responses", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert err["param"] == param and err["type"] == "invalid_request_error" and param in err["message"], err


def test_sdk_raises_and_the_server_goes_on(srv, client):
    with pytest.raises(openai.BadRequestError, match="keeps no responses"):
        client.responses.create(model="x", input=HAIKU, previous_response_id="resp_abc")
    srv.session.fail_next = True
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model="x", input=HAIKU, max_output_tokens=4)
    srv.session.fail_mid = True
    evs = raw_events(srv, {"input": HAIKU, "max_output_tokens": 8})
    assert [e["type"] for e in evs[-2:]] == ["error", "response.failed"]
    assert "simulated failure" in evs[-2]["message"] and evs[-1]["response"]["status"] == "failed"
    assert client.responses.create(model="x", input=HAIKU, max_output_tokens=2).usage.output_tokens == 2


def test_tool_calls_reasoning_and_text_translate_to_output_items():
    """Scripted chat chunks (test_server_messages.CHAT_CHUNKS: reasoning, text, two calls)
    through the Responses translation, accumulated by the openai SDK's stream state."""
    from openai._models import construct_type
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.responses import Response, ResponseStreamEvent

    from localspec.config import GenConfig
    from localspec.server.responses_out import ToResponses
    from localspec.server.schema import GenRequest
    from tests.test_server_messages import CHAT_BODY, CHAT_CHUNKS, translated

    req = GenRequest("chat", [], GenConfig(), echo={"tools": [], "tool_choice": "auto"})
    evs = translated(ToResponses(req, "m"), CHAT_CHUNKS)
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    state = ResponseStreamState(input_tools=[], text_format=openai.omit)
    for _, data in evs:
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=data))
    streamed = state._completed_response
    whole = Response.model_validate(ToResponses(req, "m").response(CHAT_BODY))
    for r in (streamed, whole):
        got = [(o.type, o.content[0].text if o.type in ("message", "reasoning") else (o.call_id, o.name, o.arguments))
               for o in r.output]
        assert got == [("reasoning", "Weather and time."), ("message", "Checking."),
                       ("function_call", ("call_a", "get_weather", '{"city": "Paris"}')),
                       ("function_call", ("call_b", "get_time", '{"zone": "CET"}'))]
        assert r.status == "completed" and r.usage.input_tokens == 30 and r.usage.input_tokens_details.cached_tokens == 4
    added = [d["output_index"] for n, d in evs if n == "response.output_item.added"]
    done = [d["output_index"] for n, d in evs if n == "response.output_item.done"]
    assert added == done == [0, 1, 2, 3]
    args_done = [d["arguments"] for n, d in evs if n == "response.function_call_arguments.done"]
    assert args_done == ['{"city": "Paris"}', '{"zone": "CET"}']
    delta = next(d for n, d in evs if n == "response.output_text.delta")
    assert delta["localspec"]["provenance"][0]["text"] == "Checking."


# ------------------------------------------------------------------------------ tools (a model that renders them)
qsrv = test_server_messages.qsrv  # Qwen2.5-Coder-0.5B: its template renders tools
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": test_server_messages.WEATHER_SCHEMA, "strict": True}


@pytest.mark.slow
def test_function_call_round_trip(qsrv):
    import jsonschema

    c = openai.OpenAI(base_url=qsrv.url + "/v1", api_key="x", max_retries=0, timeout=300)
    ask = "What's the weather in Paris right now?"
    r = c.responses.create(model="qwen", input=ask, tools=[WEATHER], tool_choice="required")
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id
    args = json.loads(calls[0].arguments)
    jsonschema.validate(args, test_server_messages.WEATHER_SCHEMA)
    with c.responses.stream(model="qwen", input=ask, tools=[WEATHER], tool_choice="required") as st:
        deltas = "".join(e.delta for e in st if e.type == "response.function_call_arguments.delta")
        final = st.get_final_response()
    assert json.loads(deltas) == args and [o.arguments for o in final.output if o.type == "function_call"] == [
        calls[0].arguments]
    # the call and its output go back as input items; "none": the 0.5B model, left to choose, calls again
    items = [{"role": "user", "content": ask}, *[o.model_dump(exclude_none=True) for o in r.output],
             {"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"temp_c": 21, "sky": "sunny"}'}]
    answer = c.responses.create(model="qwen", input=items, tools=[WEATHER], tool_choice="none", max_output_tokens=60)
    assert [o.type for o in answer.output] == ["message"]
    assert "21" in answer.output_text or "sunny" in answer.output_text.lower()


@pytest.mark.slow
def test_openai_agents_responses_model_runs_a_function_tool(qsrv):
    """openai-agents' default model class speaks the Responses API."""
    seen, result = run_weather_agent(qsrv.url, "OpenAIResponsesModel")
    assert seen and "paris" in seen[0].lower()
    assert result.final_output
