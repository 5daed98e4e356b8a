"""How a chat template asks the model to write a tool call, and parsing those calls back.

The format is read off the model's own chat template, as llama.cpp's common/chat.cpp does,
but through renders (the Session API's `render`), not the template source: a probe
conversation with one tool and one past call is rendered, and the text the template writes
for that call names the format (`<tool_call>` + `<function=`: Qwen3-Coder XML;
`<tool_call>`: Hermes / Qwen; `[TOOL_CALLS]`: Mistral; Llama 3's headers: its bare JSON).
A template whose render does not change when `tools` are passed renders no tools: `detect`
returns None and the server answers 400 rather than silently dropping them.

Parsing follows what the models really write (recorded outputs in tests/test_toolcall_parse.py)
and what llama.cpp's parsers tolerate: `arguments` as an object or as a JSON string,
`parameters` for `arguments` (Llama), a call block left unclosed at the end of the answer
(max_tokens, or a model that stops after the JSON), and, for Hermes, a small model's bare
JSON object or fenced ```json block in place of the tagged call (llama-server passes those
on as text; here they become the call when they name a declared tool). A call that does not
parse, or names no declared tool, stays in `content` as text: never an exception.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

_ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True)
class Format:
    """One tool-call format: its markers and the JSON key of the arguments.

    open / close: the text around each call ("" when a call is bare JSON); trigger: what,
    once written, starts a call (the lazy grammar's trigger; "" = the call is the whole
    answer, constrained from the first token); args_key: "arguments" or "parameters";
    grammar: whether call_grammar covers it (the XML-ish and Mistral v11 forms are parsed
    but not constrained); id_len: the length of call ids (Mistral's templates insist on 9);
    streams_args: a call's head goes out once its name is written and its JSON arguments in
    pieces (server/tool_output.py; the other formats go out whole, once complete)."""

    name: str
    open: str = ""
    close: str = ""
    args_key: str = "arguments"
    grammar: bool = True
    id_len: int = 24
    streams_args: bool = False

    @property
    def trigger(self) -> str:
        return self.open

    def new_id(self) -> str:
        """A call id: `call_<random>` as OpenAI's (Mistral: 9 letters and digits)."""
        rand = "".join(secrets.choice(_ALNUM) for _ in range(self.id_len))
        return rand if self.id_len < 12 else f"call_{rand}"


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("hermes", "<tool_call>", "</tool_call>", streams_args=True),
    Format("qwen3_coder", "<tool_call>", "</tool_call>", grammar=False),
    Format("llama3", "", "", args_key="parameters"),
    Format("mistral", "[TOOL_CALLS]", "", id_len=9),
    Format("mistral_v11", "[TOOL_CALLS]", "", grammar=False, id_len=9),
)}

_PROBE = "localspec_probe"
_PROBE_TOOL = {"type": "function", "function": {
    "name": _PROBE, "description": "probe",
    "parameters": {"type": "object", "properties": {"probe_arg": {"type": "string"}}, "required": ["probe_arg"]}}}

Render = Callable[[list[dict], list[dict] | None], str]


def detect(render: Render) -> Format | None:
    """The template's tool-call format, or None when it renders no tools.

    `render(messages, tools)` is the chat template's text for the messages with `tools`
    passed to it (None: without). Raises nothing: a template that refuses the probe history
    is read from its tools render alone."""
    user = [{"role": "user", "content": "hi"}]
    try:
        with_tools = render(user, [_PROBE_TOOL])
        without = render(user, None)
    except Exception:  # noqa: BLE001 - a template that cannot render tools renders no tools
        return None
    if with_tools == without or _PROBE not in with_tools:
        return None
    call = {"id": "abcdefghi", "type": "function", "function": {"name": _PROBE, "arguments": {"probe_arg": "x"}}}
    history = [*user, {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "abcdefghi", "name": _PROBE, "content": "ok"}]
    try:
        text = render(history, [_PROBE_TOOL])
    except Exception:  # noqa: BLE001 - see the docstring
        text = with_tools
    return _format_of(text)


def _format_of(text: str) -> Format:
    if "<tool_call>" in text and "<function=" in text:
        return FORMATS["qwen3_coder"]
    if "<tool_call>" in text:
        return FORMATS["hermes"]
    if "[TOOL_CALLS]" in text:
        return FORMATS["mistral_v11" if "[ARGS]" in text else "mistral"]
    if "<|start_header_id|>" in text or "<|python_tag|>" in text:
        return FORMATS["llama3"]
    return FORMATS["hermes"]  # tools render, the call format is unknown: the commonest one


# ---------------------------------------------------------------------------- parsing
@dataclass
class Call:
    """One parsed call: OpenAI's `function.name` and `function.arguments` (JSON text)."""

    name: str
    arguments: str
    id: str = ""

    def to_openai(self, index: int | None = None) -> dict:
        out: dict = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        if index is not None:
            out = {"index": index, **out}
        return out


@dataclass
class Parsed:
    """The answer split into text and calls: content is None when only calls were written."""

    content: str | None
    calls: list[Call] = field(default_factory=list)


def parse_calls(text: str, fmt: Format, tools: Sequence[Mapping], *, parallel: bool = True) -> Parsed:
    """The model's answer -> (content outside the calls or None, calls in order).

    `tools`: the request's OpenAI tools (`{"type": "function", "function": {...}}`); a call
    naming none of them stays text. With `parallel` False only the first call is kept (the
    rest of the answer is dropped, as OpenAI's parallel_tool_calls=false promises one)."""
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    if fmt.name in ("hermes", "qwen3_coder"):
        parsed = _tagged(text, fmt, schemas)
    elif fmt.name.startswith("mistral"):
        parsed = _mistral(text, schemas)
    else:
        parsed = _bare(text, fmt, schemas)
    for c in parsed.calls:
        c.id = fmt.new_id()
    if not parallel and len(parsed.calls) > 1:
        parsed.calls = parsed.calls[:1]
    return parsed


def content_end(text: str, fmt: Format) -> int:
    """How much of a streamed answer is surely content: up to a call's opening marker, or a
    tail that could still become one (held back until the next piece tells). An answer that
    starts like a bare JSON call (`{`, a ```json fence, Llama's python tag) is held whole:
    it may be the call (Hermes: a small model's untagged one)."""
    head = text.lstrip()
    starts = ("{", "```json", "<|python_tag|>") if fmt.name in ("hermes", "llama3") else ()
    if head and any(head.startswith(s) or s.startswith(head) for s in starts):
        return 0
    if not fmt.open:
        return len(text)
    markers = [fmt.open] + (["<function="] if fmt.name == "qwen3_coder" else [])
    at = min((i for i in (text.find(m) for m in markers) if i >= 0), default=-1)
    if at >= 0:
        return at
    for k in range(min(len(text), max(map(len, markers)) - 1), 0, -1):
        if any(m.startswith(text[-k:]) for m in markers):
            return len(text) - k
    return len(text)


def _tagged(text: str, fmt: Format, schemas: Mapping[str, Mapping]) -> Parsed:
    """Hermes / Qwen `<tool_call>{json}</tool_call>` and Qwen3-Coder's XML inside the same tags."""
    calls: list[Call] = []
    kept: list[str] = []
    pos = 0
    opener = re.compile(re.escape(fmt.open) + (r"|(?=<function=)" if fmt.name == "qwen3_coder" else ""))
    while True:
        m = opener.search(text, pos)
        if m is None:
            kept.append(text[pos:])
            break
        end = text.find(fmt.close, m.end())
        body_end, nxt = (len(text), len(text)) if end < 0 else (end, end + len(fmt.close))
        body = text[m.end() : body_end]
        got, rest = (_xml_calls(body, schemas), "") if fmt.name == "qwen3_coder" else _leading_calls(body, schemas)
        if got:
            kept.append(text[pos : m.start()] + rest)
            calls += got
        else:
            kept.append(text[pos:nxt])
        pos = nxt
    if not calls and fmt.name == "hermes":  # a small model's untagged call
        call = _json_call(text, fmt, schemas)
        if call:
            return Parsed(None, call)
    return Parsed(_content("".join(kept)), calls)


def _content(text: str) -> str | None:
    return text.strip() or None


_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


def _json_call(body: str, fmt: Format, schemas: Mapping[str, Mapping]) -> list[Call]:
    """One `{"name": ..., "arguments": ...}` object (fenced or not) -> [Call], or []."""
    body = body.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        obj = json.loads(body)
    except ValueError:
        return []
    call = _call_of(obj, schemas)
    return [call] if call else []


def _leading_calls(body: str, schemas: Mapping[str, Mapping]) -> tuple[list[Call], str]:
    """The call objects a tagged block starts with (a small model puts several in one block,
    or goes on writing after the call), and the text after them."""
    whole = _json_call(body, FORMATS["hermes"], schemas)
    if whole:
        return whole, ""
    dec = json.JSONDecoder()
    calls: list[Call] = []
    i = len(body) - len(body.lstrip())
    while i < len(body):
        try:
            obj, j = dec.raw_decode(body, i)
        except ValueError:
            break
        call = _call_of(obj, schemas)
        if call is None:
            break
        calls.append(call)
        i = j + len(body[j:]) - len(body[j:].lstrip())
    return calls, (body[i:] if calls else "")


def _call_of(obj: object, schemas: Mapping[str, Mapping]) -> Call | None:
    """A decoded call object -> Call, if it names a declared tool with object arguments."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # {"type": "function", "function": {...}}
        obj = obj["function"]
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # arguments sent as a JSON string, OpenAI's own shape
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return None
    if not isinstance(name, str) or name not in schemas or not isinstance(args, dict):
        return None
    return Call(name, json.dumps(args, ensure_ascii=False))


_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)


def _xml_calls(body: str, schemas: Mapping[str, Mapping]) -> list[Call]:
    """Qwen3-Coder: `<function=NAME>\\n<parameter=P>\\nvalue\\n</parameter>\\n</function>`.
    A value is JSON when its schema says it is not a string (and it parses), text otherwise,
    one newline trimmed at each end (llama.cpp's rule)."""
    calls = []
    for fm in _FUNCTION.finditer(body):
        name = fm.group(1)
        if name not in schemas:
            return []
        props = (schemas[name] or {}).get("properties") or {}
        args: dict[str, object] = {}
        for pm in _PARAM.finditer(fm.group(2)):
            key, raw = pm.group(1), pm.group(2)
            raw = raw[1:] if raw.startswith("\n") else raw
            raw = raw[:-1] if raw.endswith("\n") else raw
            args[key] = _xml_value(raw, props.get(key) or {})
        calls.append(Call(name, json.dumps(args, ensure_ascii=False)))
    return calls


def _xml_value(raw: str, schema: Mapping) -> object:
    types = schema.get("type")
    types = set(types) if isinstance(types, list) else {types} if types else set()
    if types and types <= {"string"}:
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _bare(text: str, fmt: Format, schemas: Mapping[str, Mapping]) -> Parsed:
    """Llama 3.x: the answer is one or more JSON call objects (after `<|python_tag|>`, or
    none), separated by `;` or whitespace; anything else leaves the whole answer as text."""
    body = text.strip()
    body = body.removeprefix("<|python_tag|>").strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    calls = _json_sequence(body, schemas, sep=";")
    return Parsed(None, calls) if calls else Parsed(_content(text))


def _json_sequence(body: str, schemas: Mapping[str, Mapping], sep: str) -> list[Call]:
    """Call objects back to back (or one JSON array of them) filling `body`, or []."""
    dec = json.JSONDecoder()
    calls: list[Call] = []
    i = 0
    while i < len(body):
        try:
            obj, i = dec.raw_decode(body, i)
        except ValueError:
            return []
        for item in obj if isinstance(obj, list) else [obj]:
            call = _call_of(item, schemas)
            if call is None:
                return []
            calls.append(call)
        while i < len(body) and (body[i].isspace() or body[i] == sep):
            i += 1
    return calls


_MISTRAL_V11 = re.compile(r"\[TOOL_CALLS\]\s*([^\[\s]+)\s*(?:\[CALL_ID\]\s*\S+?\s*)?\[ARGS\]")


def _mistral(text: str, schemas: Mapping[str, Mapping]) -> Parsed:
    """`[TOOL_CALLS][{"name": .., "arguments": ..}, ...]` (v3 / v7 templates) or, from v11 on,
    `[TOOL_CALLS]name[ARGS]{json}` once per call; text before the first marker is content."""
    at = text.find("[TOOL_CALLS]")
    if at < 0:
        return Parsed(_content(text))
    head, rest = text[:at], text[at:]
    if _MISTRAL_V11.match(rest):
        calls: list[Call] = []
        dec = json.JSONDecoder()
        pos = 0
        while True:
            m = _MISTRAL_V11.match(rest, pos)
            if m is None:
                break
            try:
                args, pos = dec.raw_decode(rest, m.end())
            except ValueError:
                return Parsed(_content(text))
            call = _call_of({"name": m.group(1), "arguments": args}, schemas)
            if call is None:
                return Parsed(_content(text))
            calls.append(call)
            while pos < len(rest) and rest[pos].isspace():
                pos += 1
        if rest[pos:].strip():
            return Parsed(_content(text))
        return Parsed(_content(head), calls)
    calls = _json_sequence(rest[len("[TOOL_CALLS]") :].strip(), schemas, sep=",")
    return Parsed(_content(head), calls) if calls else Parsed(_content(text))
