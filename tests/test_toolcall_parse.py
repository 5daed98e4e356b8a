"""Tool-call parsing per format, on recorded model outputs (malformed ones included), the
format's detection from renders, the streamed content split, and the call grammar's compile.
Pure: no model."""

from __future__ import annotations

import json

import pytest

from localspec.constrain import ConstraintSpec
from localspec.toolcall import FORMATS, call_grammar, detect, parse_calls
from localspec.toolcall.formats import content_end

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
READ = {"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
TOOLS = [WEATHER, READ]


def args(call) -> dict:
    return json.loads(call.arguments)


# recorded from Qwen2.5-Coder-0.5B-Instruct (greedy, the server's template)
QWEN_REQUIRED = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}'
QWEN_AUTO_FENCED = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'


def test_hermes_calls_content_and_ids():
    fmt = FORMATS["hermes"]
    text = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}\n</tool_call>')
    p = parse_calls(text, fmt, TOOLS)
    assert p.content == "Let me look."
    assert [c.name for c in p.calls] == ["get_weather", "read_file"]
    assert args(p.calls[0]) == {"city": "Paris"} and args(p.calls[1]) == {"path": "a.py"}  # string arguments decoded
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in p.calls)
    assert p.calls[0].id != p.calls[1].id
    one = parse_calls(text, fmt, TOOLS, parallel=False)
    assert [c.name for c in one.calls] == ["get_weather"]
    assert p.calls[0].to_openai(0) == {"index": 0, "id": p.calls[0].id, "type": "function",
                                       "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_hermes_recorded_small_model_outputs():
    fmt = FORMATS["hermes"]
    p = parse_calls(QWEN_REQUIRED, fmt, TOOLS)  # the block left unclosed: the model ended after the JSON
    assert p.content is None and args(p.calls[0]) == {"city": "Paris", "unit": "c"}
    p = parse_calls(QWEN_AUTO_FENCED, fmt, TOOLS)  # a fenced block instead of the tag
    assert p.content is None and p.calls[0].name == "get_weather" and args(p.calls[0]) == {"city": "Paris"}


def test_a_block_holding_several_calls_or_trailing_text():
    # recorded (required, before the strict close): a second, untagged call, cut by max_tokens
    text = ('<tool_call>\n{"name": "read_file", "arguments": {"path": "string"}}\n'
            '{"name": "edit_file", "arguments": {"path": "string",')
    p = parse_calls(text, FORMATS["hermes"], TOOLS)
    assert [c.name for c in p.calls] == ["read_file"] and p.content.startswith('{"name": "edit_file"')
    two = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n{"name": "read_file", "arguments": {"path": "b"}}\n</tool_call>'
    assert [args(c)["path"] for c in parse_calls(two, FORMATS["hermes"], TOOLS).calls] == ["a", "b"]


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',  # cut by max_tokens
    '<tool_call>\n{"name": "launch_rockets", "arguments": {}}\n</tool_call>',  # not a declared tool
    '<tool_call>\n{"name": "get_weather", "arguments": [1, 2]}\n</tool_call>',  # arguments not an object
    '<tool_call>\nget_weather(city="Paris")\n</tool_call>',  # not JSON
    '{"name": "get_weather"',  # a bare call cut short
    'Use {"name": "x"} as the key.',  # JSON-ish prose
])
def test_malformed_hermes_calls_stay_text(text):
    p = parse_calls(text, FORMATS["hermes"], TOOLS)
    assert p.calls == [] and p.content == text.strip()


def test_qwen3_coder_xml_values_typed_by_the_schema():
    fmt = FORMATS["qwen3_coder"]
    text = ("I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n"
            "<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/<a>.py\n</parameter>\n</function>\n</tool_call>")
    p = parse_calls(text, fmt, TOOLS)
    assert p.content == "I'll check."
    assert args(p.calls[0]) == {"city": "New York", "days": 3}  # an integer by the schema
    assert args(p.calls[1]) == {"path": "src/<a>.py"}  # a string stays text, markup and all
    # Qwen3-Coder may drop the opening <tool_call> (llama.cpp's tool-call-first rule)
    p = parse_calls("<function=read_file>\n<parameter=path>\nx\n</parameter>\n</function>\n</tool_call>", fmt, TOOLS)
    assert p.calls[0].name == "read_file" and p.content is None
    bad = "<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>"
    assert parse_calls(bad, fmt, TOOLS).calls == []


def test_llama3_bare_json_and_python_tag():
    fmt = FORMATS["llama3"]
    p = parse_calls('{"name": "get_weather", "parameters": {"city": "Oslo"}}', fmt, TOOLS)
    assert p.content is None and args(p.calls[0]) == {"city": "Oslo"}
    p = parse_calls('<|python_tag|>{"name": "read_file", "parameters": {"path": "a"}}; '
                    '{"name": "get_weather", "parameters": {"city": "Rome"}}', fmt, TOOLS)
    assert [c.name for c in p.calls] == ["read_file", "get_weather"]
    p = parse_calls('{"type": "function", "name": "get_weather", "parameters": {"city": "Oslo"}}', fmt, TOOLS)
    assert p.calls[0].name == "get_weather"
    text = "The weather is sunny."
    assert parse_calls(text, fmt, TOOLS).content == text
    assert parse_calls('{"name": "get_weather", "parameters": {"city": "Oslo"}} and more', fmt, TOOLS).calls == []


def test_mistral_array_and_v11_forms():
    p = parse_calls('Sure. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Lyon"}, "id": "abc123xyz"}, '
                    '{"name": "read_file", "arguments": {"path": "b"}}]', FORMATS["mistral"], TOOLS)
    assert p.content == "Sure." and [c.name for c in p.calls] == ["get_weather", "read_file"]
    assert all(len(c.id) == 9 and c.id.isalnum() for c in p.calls)  # Mistral's templates insist on 9
    p = parse_calls('[TOOL_CALLS]get_weather[ARGS]{"city": "Nice"}[TOOL_CALLS]read_file[ARGS]{"path": "c"}',
                    FORMATS["mistral_v11"], TOOLS)
    assert [args(c) for c in p.calls] == [{"city": "Nice"}, {"path": "c"}] and p.content is None
    broken = '[TOOL_CALLS]get_weather[ARGS]{"city": '
    assert parse_calls(broken, FORMATS["mistral_v11"], TOOLS).content == broken.strip()
    assert parse_calls("[TOOL_CALLS] [oops", FORMATS["mistral"], TOOLS).calls == []


@pytest.mark.parametrize("fmt, text, end", [
    ("hermes", "Hello there", 11),
    ("hermes", "Hello <tool_call>\n{", 6),
    ("hermes", "Hello <tool_", 6),  # may become the marker: held
    ("hermes", "Hello <b>", 9),
    ("hermes", '  {"name"', 0),  # may be an untagged call: held whole
    ("hermes", "``", 0),
    ("hermes", "```python\nx", 11),
    ("qwen3_coder", "ok <function=f>", 3),
    ("llama3", "<|python", 0),
    ("llama3", "Sunny", 5),
    ("mistral", "Sure [TOOL", 5),
])
def test_streamed_content_stops_where_a_call_may_start(fmt, text, end):
    assert content_end(text, FORMATS[fmt]) == end


def test_detect_reads_the_format_off_renders():
    def hermes(messages, tools):
        head = "".join(f"<tools>{json.dumps(t)}</tools>" for t in tools or [])
        calls = "".join(f"<tool_call>{json.dumps(c['function'])}</tool_call>"
                        for m in messages for c in m.get("tool_calls", []))
        return head + "".join(m["content"] for m in messages) + calls

    assert detect(hermes).name == "hermes"
    assert detect(lambda m, t: "".join(x["content"] for x in m)) is None  # tools never rendered

    def coder(messages, tools):
        out = hermes(messages, tools)
        return out.replace("<tool_call>{", "<tool_call><function=localspec_probe><parameter=probe_arg>{")

    assert detect(coder).name == "qwen3_coder"

    def mistral(messages, tools):
        if any(m.get("tool_calls") for m in messages):
            return "[AVAILABLE_TOOLS]x[/AVAILABLE_TOOLS][TOOL_CALLS]localspec_probe[ARGS]{}"
        return "[AVAILABLE_TOOLS]localspec_probe[/AVAILABLE_TOOLS]" if tools else "plain"

    assert detect(mistral).name == "mistral_v11"

    def refuses_history(messages, tools):
        if len(messages) > 1:
            raise ValueError("no tool history")
        return "<|start_header_id|>" + (json.dumps(tools) if tools else "")

    assert detect(refuses_history).name == "llama3"


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral"])
def test_the_call_grammar_compiles_and_names_every_tool(fmt):
    text = call_grammar(FORMATS[fmt], TOOLS)
    ConstraintSpec("lark", text).grammar()  # raises on a broken grammar
    assert '\\"get_weather\\"' in text and '\\"read_file\\"' in text
    assert f'\\"{FORMATS[fmt].args_key}\\": ' in text


# ---------------------------------------------------------------------------- the server's split
def _req(fmt: str = "hermes", parallel: bool = True, legacy: bool = False):
    from localspec.config import GenConfig
    from localspec.server.schema import GenRequest
    from localspec.server.tools import ToolRequest

    return GenRequest("chat", [{"role": "user", "content": "x"}], GenConfig(), stream=True,
                      tools=ToolRequest(TOOLS, "auto", None, parallel, legacy), tool_format=FORMATS[fmt])


def _stream(req, pieces: list[str], finish: str = "stop") -> tuple[str, list[dict], str | None]:
    """Feed pieces through ToolStream the way replies.sse does: (content, tool_call deltas, finish)."""
    from localspec.server.stream import Shapes
    from localspec.server.tool_output import ToolStream

    shapes = Shapes(req, "m")
    ts = ToolStream(req)
    chunks = []
    for p in pieces:
        chunks += ts.delta(shapes, [{"kind": "target", "text": p, "tokens": 1}])
    final = shapes._chunk(shapes._choice(None, finish))
    chunks += ts.final(shapes, [final])
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    deltas = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    return content, deltas, chunks[-1]["choices"][0]["finish_reason"]


def _accumulate(deltas: list[dict]) -> dict[int, dict]:
    calls: dict[int, dict] = {}
    for d in deltas:
        c = calls.setdefault(d["index"], {"id": None, "name": "", "arguments": ""})
        c["id"] = d.get("id") or c["id"]
        c["name"] += d.get("function", {}).get("name") or ""
        c["arguments"] += d.get("function", {}).get("arguments") or ""
    return calls


def test_streamed_calls_go_out_as_deltas():
    text = ('Checking <b>now</b>.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>')
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)]  # markers split across pieces
    content, deltas, finish = _stream(_req(), pieces)
    assert content == "Checking <b>now</b>.\n" and finish == "tool_calls"
    calls = _accumulate(deltas)
    assert [calls[i]["name"] for i in (0, 1)] == ["get_weather", "read_file"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"} and calls[0]["id"].startswith("call_")
    assert deltas[0]["function"]["arguments"] == "" and "id" in deltas[0] and "id" not in deltas[1]
    assert len([d for d in deltas if d["index"] == 0]) > 2  # the arguments went out in pieces
    assert calls[0]["arguments"] == '{"city": "Paris"}'  # the model's own JSON text, pieces concatenated
    _, deltas, _ = _stream(_req(parallel=False), pieces)
    assert list(_accumulate(deltas)) == [0]
    # a small model's fenced call is held whole, then goes out as the call (as non-streamed)
    content, deltas, finish = _stream(_req(), [QWEN_AUTO_FENCED[:4], QWEN_AUTO_FENCED[4:]])
    assert content == "" and finish == "tool_calls" and _accumulate(deltas)[0]["name"] == "get_weather"


def test_an_untagged_call_streams_its_head_before_the_answer_ends():
    """Qwen2.5-Coder answers a tool request with bare JSON: the call's head goes out as soon
    as the name is written (an agent's time to first token is not the whole call's)."""
    text = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
    pieces = [text[i : i + 6] for i in range(0, len(text), 6)]
    from localspec.server.stream import Shapes
    from localspec.server.tool_output import ToolStream

    req = _req()
    shapes, ts = Shapes(req, "m"), ToolStream(req)
    first = None
    for i, p in enumerate(pieces):
        got = [tc for c in ts.delta(shapes, [{"kind": "target", "text": p, "tokens": 1}])
               for tc in c["choices"][0]["delta"].get("tool_calls") or []]
        if got and first is None:
            first = i
    head = len('{"name": "get_weather", "arguments": {')  # the head is known once this is written
    assert first is not None and first == (head - 1) // 6 < len(pieces) - 3
    content, deltas, finish = _stream(_req(), pieces)
    assert content == "" and finish == "tool_calls"
    call = _accumulate(deltas)[0]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris", "days": 2}
    assert len(deltas) > 2  # the arguments went out in pieces
    # not a declared tool: held, then text (as non-streamed)
    other = '{"name": "launch", "arguments": {"x": 1}}'
    content, deltas, finish = _stream(_req(), [other[:9], other[9:]])
    assert content == other and deltas == [] and finish == "stop"


@pytest.mark.parametrize("fmt, text", [
    ("qwen3_coder", "Ok.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n"
                    "</tool_call>\n<tool_call>\n<function=read_file>\n<parameter=path>\nx\n</parameter>\n</function>\n"
                    "</tool_call>"),
    ("mistral", 'Ok.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}}, '
                '{"name": "read_file", "arguments": {"path": "x"}}]'),
])
def test_other_formats_stream_whole_calls(fmt, text):
    pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
    content, deltas, finish = _stream(_req(fmt), pieces)
    calls = _accumulate(deltas)
    assert content.strip() == "Ok." and finish == "tool_calls"
    assert [calls[i]["name"] for i in (0, 1)] == ["get_weather", "read_file"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Rome"} and json.loads(calls[1]["arguments"]) == {"path": "x"}


def test_a_malformed_streamed_call_comes_out_as_text():
    text = 'Sure.\n<tool_call>\n{"name": "launch", "arguments": {"city": "x"}}\n</tool_call>'  # not a declared tool
    content, deltas, finish = _stream(_req(), [text[:9], text[9:30], text[30:]])
    assert content == text and deltas == [] and finish == "stop"
    # cut by max_tokens inside the arguments: as OpenAI, the head and the arguments so far
    cut = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'
    content, deltas, finish = _stream(_req(), [cut[:30], cut[30:]], finish="length")
    assert content == "Sure.\n" and finish == "length"
    assert _accumulate(deltas)[0] == {"id": deltas[0]["id"], "name": "get_weather", "arguments": '{"city": "Pa'}
    content, deltas, finish = _stream(_req(), ["<tool", "s are fun"])  # a possible marker that was not
    assert content == "<tools are fun" and finish == "stop"


def test_the_non_streamed_answer_is_rewritten():
    from localspec.server.tool_output import apply

    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": QWEN_AUTO_FENCED},
                         "finish_reason": "stop"}]}
    apply(body, _req())
    ch = body["choices"][0]
    assert ch["finish_reason"] == "tool_calls" and ch["message"]["content"] is None
    assert ch["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    legacy = {"choices": [{"index": 0, "message": {"role": "assistant", "content": QWEN_REQUIRED},
                           "finish_reason": "stop"}]}
    apply(legacy, _req(legacy=True))
    assert legacy["choices"][0]["finish_reason"] == "function_call"
    assert legacy["choices"][0]["message"]["function_call"]["name"] == "get_weather"


# ---------------------------------------------------------------------------- never a 500
def _places(obj):
    """Every (container, key) of a JSON tree: where a value can be replaced."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield obj, k
        yield from _places(v)


def test_tool_fields_and_history_fuzzed_are_400_or_accepted():
    """Random damage to a valid tools request (values swapped for hostile ones, keys
    dropped) on a tool-capable format: parse_chat answers or raises ApiError, nothing else."""
    import copy
    import random

    from localspec.config import GenConfig
    from localspec.server.errors import ApiError
    from localspec.server.schema import Limits, parse_chat

    base = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function",
                              "function": {"name": "get_weather", "arguments": '{"city": "x"}'}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "21C"}],
            "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "read_file"}},
            "parallel_tool_calls": False}
    evil = [None, 0, -1, 2**64, 1.5, True, "", "x", "required", "none", [], {}, [None], [{}], {"name": 5},
            {"type": "function"}, {"type": "function", "function": {"name": "get_weather"}}, [{"type": "objekt"}],
            {"type": "object", "properties": 5}, '{"a": ', "\x00"]
    limits = Limits(cfg=GenConfig(method="ar"), n_ctx=4096, tool_format=FORMATS["hermes"])
    rng = random.Random(41)
    outcomes = {"ok": 0, "400": 0}
    for _ in range(600):
        body = copy.deepcopy(base)
        for _ in range(rng.randint(1, 3)):
            container, key = rng.choice(list(_places(body)))
            if rng.random() < 0.2 and isinstance(container, dict):
                del container[key]
            else:
                container[key] = copy.deepcopy(rng.choice(evil))
        try:
            parse_chat(body, limits)
            outcomes["ok"] += 1
        except ApiError as e:
            assert e.status == 400 and e.param
            outcomes["400"] += 1
    assert outcomes["ok"] > 20 and outcomes["400"] > 200


def test_parsing_never_raises_on_cut_or_garbled_answers():
    import random

    rng = random.Random(5)
    samples = [QWEN_REQUIRED, QWEN_AUTO_FENCED, '[TOOL_CALLS]get_weather[ARGS]{"city": "a"}',
               "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>",
               '<|python_tag|>{"name": "read_file", "parameters": {"path": "p"}}']
    for _ in range(400):
        s = rng.choice(samples)
        cut = s[: rng.randint(0, len(s))] + "".join(rng.choice('{}[]"<>/=\n ,:') for _ in range(rng.randint(0, 4)))
        for fmt in FORMATS.values():
            p = parse_calls(cut, fmt, TOOLS)
            assert p.content is None or isinstance(p.content, str)
            assert all(isinstance(json.loads(c.arguments), dict) for c in p.calls)
