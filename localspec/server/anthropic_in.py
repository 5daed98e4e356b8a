"""Anthropic Messages API requests (`POST /v1/messages`) -> the chat request the server runs.

The body is checked with Anthropic's own field paths (`messages[1].content[0].type`), then
rewritten as a `/v1/chat/completions` body and parsed by schema.parse_chat, so sampling
defaults, limits and tool calling are the chat route's. What maps where:

    system (string or text blocks)        -> a first system message
    text blocks                           -> message text
    tool_use blocks (assistant)           -> the assistant message's tool_calls
    tool_result blocks (user)             -> tool messages, before the user's own text
    thinking / redacted_thinking blocks   -> dropped (past turns keep their answer only)
    image / document / server-tool blocks -> 400: the models are text-only, no server tools
    stop_sequences, max_tokens, temperature, top_p, top_k -> the chat fields of those names
    tools {name, description, input_schema}            -> function tools
    tool_choice {auto | any | tool | none}             -> auto | required | a named function | none
    thinking {enabled, budget_tokens} / {disabled}     -> reasoning_budget / enable_thinking false

localspec's own fields (`speculative`, `localspec`, `chat_template_kwargs`, `seed`, `min_p`)
pass through, so provenance and per-request speculation work here too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from localspec.server.apis_common import (
    chat_tools,
    ensure_items,
    ensure_list,
    ensure_object,
    ensure_str,
    format_of,
    renamed,
    text_of,
)
from localspec.server.errors import ApiError, invalid, unsupported, wrong_type
from localspec.server.fields import check_keys, check_policy, get_int, get_object
from localspec.server.schema import GenRequest, Limits, parse_chat
from localspec.session import Session
from localspec.thinking.split import answer_only, markers_of

PASSTHROUGH = frozenset({"speculative", "localspec", "chat_template_kwargs", "seed", "min_p",
                         "temperature", "top_p", "top_k", "stream"})
# accepted, no effect on the answer: prompt caching is automatic (the KV cache), no tiers or regions
NO_EFFECT = frozenset({"cache_control", "speed", "inference_geo", "diagnostics", "user_profile_id", "workspace_id"})
FIELDS = frozenset({"model", "max_tokens", "messages", "system", "stop_sequences", "tools", "tool_choice",
                    "thinking", "output_config"}) | PASSTHROUGH | NO_EFFECT

_TEXT_ONLY = "the models are text-only"
CHAT_NAMES = {"response_format": "output_config.format", "stop": "stop_sequences"}  # chat field -> ours


def parse_anthropic(body: object, limits: Limits) -> GenRequest:
    """A /v1/messages body, as the GenRequest the worker runs (its answer is translated
    back by anthropic_out.py)."""
    chat, ignored = to_chat(body, limits, need_max_tokens=True)
    return finish(chat, ignored, limits)


def parse_count(body: object, limits: Limits) -> GenRequest:
    """A /v1/messages/count_tokens body: what a /v1/messages body may hold (clients send
    the request they are about to make), max_tokens not required."""
    chat, ignored = to_chat(body, limits, need_max_tokens=False)
    return finish(chat, ignored, limits)


def count_tokens(session: Session, req: GenRequest) -> int:
    """The prompt tokens `req` would evaluate, as the worker would prompt the model
    (a thinking model's past turns with their answer only, server/thinking.start)."""
    markers = markers_of(session)
    prompt = req.prompt if markers is None else answer_only(req.prompt, markers)
    return session.count_prompt(prompt, prefill=req.prefill, template_kwargs=req.template_kwargs)


def finish(chat: dict, ignored: list[str], limits: Limits) -> GenRequest:
    """parse_chat on the translated body; streams always end with usage (the translators
    need it for their closing event)."""
    try:
        req = parse_chat(chat, limits)
    except ApiError as e:
        raise renamed(e, CHAT_NAMES) from None
    req.ignored[:0] = ignored
    req.include_usage = True
    return req


def to_chat(body: object, limits: Limits, *, need_max_tokens: bool) -> tuple[dict, list[str]]:
    """The equivalent chat body, and the unknown fields accepted under --ignore-unknown-fields."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_body")
    ignored = check_policy(body, FIELDS, limits.lenient)
    chat: dict = {k: body[k] for k in PASSTHROUGH if k in body}
    if need_max_tokens and body.get("max_tokens") is None:
        raise ApiError(400, "max_tokens: Field required", param="max_tokens", code="missing_required_parameter")
    if body.get("max_tokens") is not None:
        chat["max_tokens"] = body["max_tokens"]  # parse_chat checks it
    if "messages" not in body:
        raise ApiError(400, "messages: Field required", param="messages", code="missing_required_parameter")
    messages = _system(body.get("system")) + _messages(body["messages"], limits.lenient, ignored)
    chat["messages"] = messages
    if body.get("stop_sequences") is not None:
        chat["stop"] = [ensure_str(s, f"stop_sequences[{i}]")
                        for i, s in enumerate(ensure_list(body["stop_sequences"], "stop_sequences"))]
    if body.get("tools") is not None:
        chat["tools"] = chat_tools([_tool(t, f"tools[{i}]") for i, t in enumerate(ensure_list(body["tools"], "tools"))])
    if body.get("tool_choice") is not None:
        chat.update(_tool_choice(body["tool_choice"]))
    _thinking(body.get("thinking"), chat, ignored)
    _output_config(body.get("output_config"), chat, ignored)
    if chat.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    return chat, ignored


def _system(value: object) -> list[dict]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "system", "content": value}] if value else []
    text = text_of(value, "system", ("text",), _TEXT_ONLY)
    return [{"role": "system", "content": text}]


def _messages(value: object, lenient: bool, ignored: list[str]) -> list[dict]:
    out: list[dict] = []
    for i, m in enumerate(ensure_items(value, "messages", "an array")):
        where = f"messages[{i}]"
        m = ensure_object(m, where)
        check_keys(m, frozenset({"role", "content"}), where, lenient, ignored)
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise invalid(f"{where}.role", f"{where}.role: {role!r} is not one of 'user', 'assistant' "
                          "(the system prompt goes in the top-level 'system' field)")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        out += _blocks(ensure_list(content, f"{where}.content", "a string or an array of content blocks"),
                       f"{where}.content", role)
    return out


def _blocks(blocks: list, where: str, role: str) -> list[dict]:
    """One Anthropic message's blocks -> chat messages: tool results first (they answer the
    previous assistant turn's calls), then the text with the tool calls it made."""
    texts: list[str] = []
    calls: list[dict] = []
    results: list[dict] = []
    for j, block in enumerate(blocks):
        bw = f"{where}[{j}]"
        block = ensure_object(block, bw)
        kind = block.get("type")
        if kind == "text":
            texts.append(ensure_str(block.get("text"), f"{bw}.text"))
        elif kind in ("thinking", "redacted_thinking"):
            continue  # past reasoning: the template gets the answer only (server/thinking.py)
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(block, bw))
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(block, bw))
        elif kind in ("tool_use", "tool_result"):
            raise invalid(f"{bw}.type", f"{bw}.type: a {kind} block belongs in an "
                          f"{'assistant' if kind == 'tool_use' else 'user'} message")
        elif kind in ("image", "document", "search_result"):
            raise unsupported(f"{bw}.type", f"{kind!r} blocks: {_TEXT_ONLY}")
        elif isinstance(kind, str):
            raise unsupported(f"{bw}.type", f"{kind!r} blocks are not built (text, tool_use, tool_result "
                              "and thinking blocks are)")
        else:
            raise wrong_type(f"{bw}.type", "a string", kind)
    out = list(results)
    if texts or calls or not results:
        msg: dict = {"role": role, "content": "".join(texts)}
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def _tool_use(block: Mapping[str, object], where: str) -> dict:
    name = ensure_str(block.get("name"), f"{where}.name")
    call_id = ensure_str(block.get("id"), f"{where}.id")
    args = ensure_object(block.get("input", {}), f"{where}.input")
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def _tool_result(block: Mapping[str, object], where: str) -> dict:
    call_id = ensure_str(block.get("tool_use_id"), f"{where}.tool_use_id")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = text_of(content, f"{where}.content", ("text",), _TEXT_ONLY)
    if block.get("is_error") is True:  # the model sees that the call failed, as Anthropic's API tells it
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _tool(tool: object, where: str) -> tuple[str, str | None, dict]:
    tool = ensure_object(tool, where)
    kind = tool.get("type")
    if kind not in (None, "custom"):
        raise unsupported(f"{where}.type", f"{kind!r}: Anthropic's server tools run on Anthropic's side; "
                          "only client tools ({name, description, input_schema}) are built")
    name = ensure_str(tool.get("name"), f"{where}.name")
    desc = tool.get("description")
    if desc is not None:
        desc = ensure_str(desc, f"{where}.description")
    if "input_schema" not in tool:
        raise ApiError(400, f"{where}.input_schema: Field required", param=f"{where}.input_schema",
                       code="missing_required_parameter")
    return name, desc, ensure_object(tool["input_schema"], f"{where}.input_schema")


def _tool_choice(value: object) -> dict:
    tc = ensure_object(value, "tool_choice")
    kind = tc.get("type")
    out: dict = {}
    if tc.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False
    if kind in ("auto", "none"):
        out["tool_choice"] = kind
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "tool":
        name = ensure_str(tc.get("name"), "tool_choice.name")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise invalid("tool_choice.type", f"tool_choice.type: {kind!r} is not one of 'auto', 'any', 'tool', 'none'")
    return out


def _output_config(value: object, chat: dict, ignored: list[str]) -> None:
    """Structured output (`format`: a JSON schema) -> the chat route's response_format;
    `effort` has no counterpart on a local model (listed in `localspec.ignored`)."""
    fmt = format_of(value, "output_config", "effort", ignored)
    if fmt is None:
        return
    if fmt.get("type") != "json_schema":
        raise invalid("output_config.format.type", f"output_config.format.type: {fmt.get('type')!r} is not 'json_schema'")
    schema = ensure_object(fmt.get("schema"), "output_config.format.schema")
    chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def _thinking(value: object, chat: dict, ignored: list[str]) -> None:
    """Extended thinking -> the model's own switch and budget (a model that does not think
    answers without thinking blocks, as with the switch off)."""
    if value is None:
        return
    th = ensure_object(value, "thinking")
    kind = th.get("type")
    kwargs = dict(get_object(chat, "chat_template_kwargs") or {})
    if th.get("display") is not None:  # the thinking is always returned as it was generated
        ignored.append("thinking.display")
    if kind == "enabled":
        budget = get_int(th, "budget_tokens", "thinking.budget_tokens")
        if budget is None:
            raise ApiError(400, "thinking.budget_tokens: Field required", param="thinking.budget_tokens",
                           code="missing_required_parameter")
        if budget < 0:
            raise invalid("thinking.budget_tokens", f"thinking.budget_tokens: {budget} is below 0")
        chat["reasoning_budget"] = budget
        kwargs.setdefault("enable_thinking", True)
    elif kind in ("adaptive", "between_tools"):
        kwargs.setdefault("enable_thinking", True)
    elif kind == "disabled":
        kwargs.setdefault("enable_thinking", False)
    else:
        raise invalid("thinking.type", f"thinking.type: {kind!r} is not one of 'enabled', 'disabled', "
                      "'adaptive', 'between_tools'")
    chat["chat_template_kwargs"] = kwargs
