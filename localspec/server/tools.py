"""Tool calling on /v1/chat/completions, request side: `tools`, `tool_choice`,
`parallel_tool_calls` (and the legacy `functions` / `function_call`) -> what the template
renders and the constraint the call is held to.

    tr = parse_tools(body, fmt)            # ToolRequest | None; ApiError (400) naming the field
    kwargs = template_tools(tr)            # {"tools": [...]} for the chat template, or {}
    spec = tool_constraint(tr, fmt)        # the call's ConstraintSpec, or None

`fmt` is the model's tool-call format (toolcall.detect, once per server: `detect_format`);
None when its chat template renders no tools, and then a request that wants a call is a 400
(the template would drop the tools silently and the model would never call).

What tool_choice does: "none" renders no tools and parses nothing (the answer is text);
"auto" renders them and holds a call to its tool's schema LAZILY, from the moment the
model writes the call's opening marker (decode/tool_gate.py); "required" and a named
function make the answer calls only (the marker forced, the grammar, a named function's
alone, the closing marker, then the end or another call). parallel_tool_calls=false: one
call (required: the turn ends after it; auto: the answer's first call is kept).
Adapters (the Anthropic and Responses routes) build the same OpenAI-shaped body and call
these three functions; toolcall.parse_calls and server/tool_output.py map the answer back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from localspec.constrain.spec import ConstraintSpec, Trigger
from localspec.errors import ConfigError
from localspec.server.errors import ApiError, invalid, wrong_type
from localspec.toolcall import Format, call_grammar, detect

FIELDS = frozenset({"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"})
CHOICES = ("auto", "none", "required")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})


@dataclass
class ToolRequest:
    """A request's tools. choice: auto | none | required | function (then `name`);
    legacy: the request used `functions` (the answer carries `function_call`)."""

    tools: list[dict] = field(default_factory=list)
    choice: str = "auto"
    name: str | None = None
    parallel: bool = True
    legacy: bool = False

    @property
    def active(self) -> bool:
        """Whether tools reach the template and the answer is parsed for calls."""
        return bool(self.tools) and self.choice != "none"

    def selected(self) -> list[dict]:
        """The tools a call may name (a named tool_choice: that one)."""
        return [t for t in self.tools if self.name is None or t["function"]["name"] == self.name]


def detect_format(session: object) -> Format | None:
    """The session's tool-call format from its chat template (None: it renders no tools,
    or the session cannot render). Called once when the server starts."""
    render = getattr(session, "render", None)
    if render is None:
        return None

    def probe(messages: list[dict], tools: list[dict] | None) -> str:
        return render(messages, template_kwargs={"tools": tools} if tools else None)

    return detect(probe)


def parse_tools(body: Mapping[str, object], fmt: Format | None) -> ToolRequest | None:
    """The request's tool fields, validated; None when it sends none of them."""
    if not any(body.get(k) is not None for k in FIELDS):
        return None
    legacy = body.get("functions") is not None or body.get("function_call") is not None
    if legacy and (body.get("tools") is not None or body.get("tool_choice") is not None):
        raise invalid("functions", "Invalid 'functions': send 'tools' / 'tool_choice' or the legacy "
                      "'functions' / 'function_call', not both.")
    if legacy:
        tools = _legacy_tools(body.get("functions"))
        choice, name = _choice(_legacy_choice(body.get("function_call")), tools, "function_call")
    else:
        tools = _tools(body.get("tools"))
        choice, name = _choice(body.get("tool_choice"), tools, "tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise wrong_type("parallel_tool_calls", "a boolean", parallel)
    tr = ToolRequest(tools, choice, name, parallel is not False, legacy)
    if tr.active and fmt is None:
        param = "functions" if legacy else "tools"
        raise invalid(param, f"Invalid '{param}': this model's chat template does not render tools, so the "
                      "model would never see them; serve a model whose template supports tool calling "
                      "(e.g. Qwen2.5-Coder-Instruct) or send tool_choice 'none'.", code="unsupported_value")
    return tr


def template_tools(tr: ToolRequest | None) -> dict[str, object]:
    """The chat template's `tools` variable (as llama.cpp and transformers pass it)."""
    return {"tools": tr.tools} if tr is not None and tr.active else {}


def tool_constraint(tr: ToolRequest | None, fmt: Format | None) -> ConstraintSpec | None:
    """The call's constraint: lazy behind the trigger under auto, from the first token under
    required / a named function; None when nothing is constrained (no tools, none, or a
    format the grammar does not cover: its calls are parsed from free text)."""
    if tr is None or not tr.active or fmt is None or not fmt.grammar:
        return None
    lazy = tr.choice == "auto"
    if lazy and not fmt.trigger:  # bare-JSON formats: no marker to wait for, the answer is free
        return None
    text = call_grammar(fmt, tr.selected(), parallel=tr.parallel)
    trigger = Trigger(fmt.trigger, fmt.close, lazy, tr.parallel) if fmt.trigger else None
    spec = ConstraintSpec("lark", text, origin="tools", trigger=trigger)
    try:
        spec.grammar()
    except ConfigError as e:  # each schema compiled alone already: this is the combination
        raise ApiError(400, f"Invalid 'tools': {e}", param="tools", code="invalid_grammar") from None
    return spec


# ---------------------------------------------------------------------------- fields
def _tools(value: object) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong_type("tools", "an array", value)
    out: list[dict] = []
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise wrong_type(where, "an object", tool)
        kind = tool.get("type", "function")
        if kind != "function":
            raise invalid(f"{where}.type", f"Invalid value for '{where}.type': {kind!r}; only 'function' tools "
                          "are served.", code="unsupported_value")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise ApiError(400, f"Missing required parameter: '{where}.function'.", param=f"{where}.function",
                           code="missing_required_parameter")
        out.append({"type": "function", "function": _function(fn, f"{where}.function")})
    _unique(out, "tools")
    return out


def _legacy_tools(value: object) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise wrong_type("functions", "an array", value)
    out = []
    for i, fn in enumerate(value):
        if not isinstance(fn, dict):
            raise wrong_type(f"functions[{i}]", "an object", fn)
        out.append({"type": "function", "function": _function(fn, f"functions[{i}]")})
    _unique(out, "functions")
    return out


def _function(fn: dict, where: str) -> dict:
    name = fn.get("name")
    if not isinstance(name, str):
        raise ApiError(400, f"Missing required parameter: '{where}.name'.", param=f"{where}.name",
                       code="missing_required_parameter") if name is None else wrong_type(f"{where}.name", "a string", name)
    if not _NAME.match(name):
        raise invalid(f"{where}.name", f"Invalid '{where}.name': {name[:80]!r} must be 1-64 letters, digits, "
                      "underscores, dots or dashes.")
    desc = fn.get("description")
    if desc is not None and not isinstance(desc, str):
        raise wrong_type(f"{where}.description", "a string", desc)
    out = {k: v for k, v in fn.items() if k in _FUNCTION_KEYS and v is not None}
    params = fn.get("parameters")
    if params is not None:
        if not isinstance(params, dict):
            raise wrong_type(f"{where}.parameters", "an object (a JSON schema)", params)
        try:
            ConstraintSpec("json_schema", json.dumps(params)).grammar()
        except ConfigError as e:
            raise ApiError(400, f"Invalid '{where}.parameters': {e}", param=f"{where}.parameters",
                           code="invalid_schema") from None
    return out


def _unique(tools: list[dict], param: str) -> None:
    seen: set[str] = set()
    for i, t in enumerate(tools):
        name = t["function"]["name"]
        if name in seen:
            raise invalid(param, f"Invalid '{param}': the function name {name!r} is given twice (index {i}).")
        seen.add(name)


def _legacy_choice(value: object) -> object:
    """function_call: "none" | "auto" | {"name": f} -> the tool_choice shape."""
    if isinstance(value, dict) and "function" not in value and "type" not in value:
        return {"type": "function", "function": value}
    return value


def _choice(value: object, tools: list[dict], param: str) -> tuple[str, str | None]:
    if value is None:
        return ("auto" if tools else "none"), None
    if isinstance(value, str):
        if value not in CHOICES:
            raise invalid(param, f"Invalid value for '{param}': {value[:40]!r} (one of auto, none, required, or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}).")
        if value == "required" and not tools:
            raise invalid(param, f"Invalid value for '{param}': 'required' needs 'tools'.")
        return value, None
    if not isinstance(value, dict):
        raise wrong_type(param, "a string or an object", value)
    fn = value.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if value.get("type", "function") != "function" or not isinstance(name, str):
        raise invalid(param, f"Invalid '{param}': a named choice is {{\"type\": \"function\", \"function\": "
                      "{\"name\": ...}}.")
    if name not in {t["function"]["name"] for t in tools}:
        raise invalid(param, f"Invalid '{param}': no tool is named {name[:80]!r}.")
    return "function", name
