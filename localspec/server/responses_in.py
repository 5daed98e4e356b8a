"""OpenAI Responses API requests (`POST /v1/responses`) -> the chat request the server runs.

Checked with the Responses API's own field paths (`input[2].content[0].type`), then
rewritten as a `/v1/chat/completions` body for schema.parse_chat:

    instructions                           -> a first system message
    input: a string                        -> one user message
    input items with a role (message)      -> messages (input_text / output_text parts)
    function_call items                    -> the assistant turn's tool_calls (consecutive calls: one turn)
    function_call_output items             -> tool messages
    reasoning items                        -> dropped (past turns keep their answer only)
    tools [{type: function, ...}]          -> function tools; tool_choice alike
    max_output_tokens, temperature, top_p  -> max_tokens, temperature, top_p
    text.format (json_schema, json_object) -> response_format
    reasoning.effort "none" / "minimal"    -> enable_thinking false

Nothing is kept between requests: `store` is accepted (it cannot change the answer) but
stores nothing, so `previous_response_id`, `conversation` and `item_reference` items are a
400 that says to send the whole conversation in `input`, as stateless clients (and
openai-agents by default) do.
"""

from __future__ import annotations

from localspec.server import apis_common as ac
from localspec.server.errors import ApiError, invalid, unsupported, wrong_type
from localspec.server.fields import at_least, check_keys, check_policy, get_int, get_object
from localspec.server.schema import GenRequest, Limits, parse_chat
from localspec.server.thinking import BUDGET_FIELDS

PASSTHROUGH = frozenset({"temperature", "top_p", "stream", "speculative", "localspec", "chat_template_kwargs",
                         "seed", "top_k", "min_p", "parallel_tool_calls", *BUDGET_FIELDS})
# accepted, no effect on the answer (include: extra output detail; truncation: a prompt over
# the context is a 400 either way; the rest are bookkeeping)
NO_EFFECT = frozenset({"include", "truncation", "prompt_cache_retention", "prompt_cache_options",
                       "context_management", "stream_options"})
FIELDS = frozenset({"model", "input", "instructions", "tools", "tool_choice", "max_output_tokens", "text",
                    "reasoning", "previous_response_id", "conversation", "prompt", "background",
                    "max_tool_calls"}) | PASSTHROUGH | NO_EFFECT
ECHO = ("instructions", "max_output_tokens", "metadata", "parallel_tool_calls", "temperature", "top_p",
        "tool_choice", "tools", "text", "reasoning", "store", "truncation", "user")

_STATELESS = "localspec serve keeps no responses: send the whole conversation in 'input'"
_TEXT_ONLY = "the models are text-only"
CHAT_NAMES = {"max_tokens": "max_output_tokens", "response_format": "text.format"}  # chat field -> ours
_ROLES = ("user", "assistant", "system", "developer")


def parse_responses(body: object, limits: Limits) -> GenRequest:
    """A /v1/responses body, as the GenRequest the worker runs (its answer is translated
    back by responses_out.py, which repeats the request's settings from `req.settings`)."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_body")
    ignored = check_policy(body, FIELDS, limits.lenient)
    for key in ("previous_response_id", "conversation", "prompt"):
        if body.get(key) is not None:
            raise unsupported(key, _STATELESS if key != "prompt" else "stored prompt templates are not built")
    if body.get("background"):
        raise unsupported("background", "requests are answered while the client waits")
    if body.get("max_tool_calls") is not None:
        raise unsupported("max_tool_calls", "a cap on tool calls is not built")
    chat: dict = {k: body[k] for k in PASSTHROUGH if k in body}
    n = get_int(body, "max_output_tokens")
    at_least("max_output_tokens", n, 1)
    if n is not None:
        chat["max_tokens"] = n
    if "input" not in body:
        raise ApiError(400, "Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    system = body.get("instructions")
    head = [{"role": "system", "content": ac.ensure_str(system, "instructions")}] if system else []
    chat["messages"] = head + _input(body["input"], limits.lenient, ignored)
    if body.get("tools") is not None:
        tools = [_tool(t, f"tools[{i}]") for i, t in enumerate(ac.ensure_list(body["tools"], "tools"))]
        chat["tools"] = ac.chat_tools([t[:3] for t in tools], [t[3] for t in tools])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    _text(body.get("text"), chat, ignored)
    _reasoning(body.get("reasoning"), chat, ignored)
    if chat.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    try:
        req = parse_chat(chat, limits)
    except ApiError as e:
        raise ac.renamed(e, CHAT_NAMES) from None
    req.ignored[:0] = ignored
    req.include_usage = True
    req.settings = {k: body.get(k) for k in ECHO}
    return req


def _input(value: object, lenient: bool, ignored: list[str]) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    out: list[dict] = []
    for i, item in enumerate(ac.ensure_items(value, "input", "a string or an array of input items")):
        where = f"input[{i}]"
        item = ac.ensure_object(item, where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            out.append(_message(item, where, lenient, ignored))
        elif kind == "function_call":
            call = {"id": ac.ensure_str(item.get("call_id"), f"{where}.call_id"), "type": "function",
                    "function": {"name": ac.ensure_str(item.get("name"), f"{where}.name"),
                                 "arguments": ac.ensure_str(item.get("arguments"), f"{where}.arguments")}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":  # its text, or parallel calls: one turn
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else ac.text_of(output, f"{where}.output", ("input_text",), _TEXT_ONLY)
            out.append({"role": "tool", "tool_call_id": ac.ensure_str(item.get("call_id"), f"{where}.call_id"),
                        "content": text})
        elif kind == "reasoning":
            continue  # past reasoning: the template gets the answer only (server/thinking.py)
        elif kind == "item_reference":
            raise unsupported(f"{where}.type", _STATELESS)
        elif isinstance(kind, str):
            raise unsupported(f"{where}.type", f"{kind!r} items are not built (message, function_call, "
                              "function_call_output and reasoning items are)")
        else:
            raise ApiError(400, f"Missing required parameter: '{where}.type'.", param=f"{where}.type",
                           code="missing_required_parameter")
    return out


def _message(item: dict, where: str, lenient: bool, ignored: list[str]) -> dict:
    check_keys(item, frozenset({"type", "role", "content", "id", "status", "phase"}), where, lenient, ignored)
    role = item.get("role")
    if role not in _ROLES:
        raise invalid(f"{where}.role", f"Invalid value for '{where}.role': {role!r} (one of {', '.join(_ROLES)})")
    content = item.get("content")
    if not isinstance(content, str):
        content = ac.text_of(content, f"{where}.content", ("input_text", "output_text"), _TEXT_ONLY)
    return {"role": role, "content": content}


def _tool(tool: object, where: str) -> tuple[str, str | None, dict, bool | None]:
    tool = ac.ensure_object(tool, where)
    kind = tool.get("type")
    if kind != "function":
        if not isinstance(kind, str):
            raise wrong_type(f"{where}.type", "a string", kind)
        raise unsupported(f"{where}.type", f"{kind!r} tools run on OpenAI's side; only function tools are built")
    desc = tool.get("description")
    params = tool.get("parameters")
    strict = tool.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise wrong_type(f"{where}.strict", "a boolean", strict)
    return (ac.ensure_str(tool.get("name"), f"{where}.name"),
            None if desc is None else ac.ensure_str(desc, f"{where}.description"),
            {"type": "object", "properties": {}} if params is None else ac.ensure_object(params, f"{where}.parameters"),
            strict)


def _tool_choice(value: object) -> str | dict:
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise invalid("tool_choice", f"Invalid value for 'tool_choice': {value!r} (none, auto, required or "
                          "{\"type\": \"function\", \"name\": ...})")
        return value
    tc = ac.ensure_object(value, "tool_choice")
    if tc.get("type") != "function":
        raise unsupported("tool_choice.type", f"{tc.get('type')!r}: only function tools are built")
    return {"type": "function", "function": {"name": ac.ensure_str(tc.get("name"), "tool_choice.name")}}


def _text(value: object, chat: dict, ignored: list[str]) -> None:
    """text.format -> response_format (server/structured.py compiles it)."""
    fmt = ac.format_of(value, "text", "verbosity", ignored)
    if fmt is None:
        return
    kind = fmt.get("type")
    if kind == "json_schema":
        schema = ac.ensure_object(fmt.get("schema"), "text.format.schema")
        chat["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": fmt.get("name") or "output", "schema": schema}}
    elif kind in ("json_object", "text"):
        chat["response_format"] = {"type": kind}
    else:
        raise invalid("text.format.type", f"Invalid value for 'text.format.type': {kind!r} (text, json_object "
                      "or json_schema)")


def _reasoning(value: object, chat: dict, ignored: list[str]) -> None:
    """A thinking model thinks unless the effort is "none" / "minimal" (its template's
    enable_thinking switch); other efforts and `summary` have no counterpart (ignored)."""
    if value is None:
        return
    r = ac.ensure_object(value, "reasoning")
    effort = r.get("effort")
    if effort in ("none", "minimal"):
        chat["chat_template_kwargs"] = {"enable_thinking": False, **(get_object(chat, "chat_template_kwargs") or {})}
    elif effort is not None:
        ignored.append("reasoning.effort")
    for key in ("summary", "generate_summary"):
        if r.get(key) is not None:
            ignored.append(f"reasoning.{key}")
