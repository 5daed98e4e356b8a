"""`messages` and `prompt` -> the session's Prompt (chat messages, text or token ids).

Chat clients send more than `{role, content}` strings: content as a list of parts (Continue,
Open WebUI), a `developer` role (newer SDKs), a `name`. Text parts are joined; anything that
is not text (images, audio) is refused with the exact path of the offending field
(`messages[2].content[1].type`). A last message from the assistant is a prefill, as in
llama-server: the answer continues it (one with tool calls is history, not a prefill).

Tool-call history goes to the template as transformers and llama.cpp hand it over: an
assistant turn's `tool_calls` (content may be null) with each call's `arguments` decoded
from its JSON string to an object (templates write it with `tojson`), and `tool` results
with their `tool_call_id`; the legacy `function_call` and `function` role are mapped to them.
"""

from __future__ import annotations

import json

from localspec.server.errors import ApiError, invalid, unsupported, wrong_type
from localspec.server.fields import check_keys

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_MESSAGE_KEYS = frozenset({"role", "content", "name", "refusal", "reasoning_content", "tool_calls",
                           "tool_call_id", "function_call", "audio"})


def parse_messages(value: object, lenient: bool, ignored: list[str]) -> tuple[list[dict], str]:
    """Validated messages for the chat template, and the prefill (a trailing assistant turn)."""
    if not isinstance(value, list):
        raise wrong_type("messages", "an array", value)
    if not value:
        raise invalid("messages", "'messages' must contain at least one message.", code="empty_array")
    out: list[dict] = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise wrong_type(where, "an object", m)
        check_keys(m, _MESSAGE_KEYS, where, lenient, ignored)
        role = m.get("role")
        if not isinstance(role, str):
            raise wrong_type(f"{where}.role", "a string", role)
        if role in ("tool", "function"):
            out.append(_tool_result(m, where, role))
            continue
        if role not in _ROLES:
            raise invalid(f"{where}.role", f"Invalid value for '{where}.role': {role!r} "
                          "(one of system, developer, user, assistant, tool)")
        if m.get("audio"):
            raise unsupported(f"{where}.audio", "the models are text-only")
        calls = _calls(m, where) if role == "assistant" else None
        for key in ("tool_calls", "function_call", "tool_call_id"):
            if m.get(key) and (role != "assistant" or key == "tool_call_id"):
                owner = "tool" if key == "tool_call_id" else "assistant"
                raise invalid(f"{where}.{key}", f"Invalid '{where}.{key}': only {owner} messages carry it.")
        msg: dict = {"role": _ROLES[role], "content": _content(m.get("content"), f"{where}.content", role)}
        if calls:
            msg["tool_calls"] = calls
        for key in ("name", "reasoning_content"):
            if m.get(key) is not None:
                if not isinstance(m[key], str):
                    raise wrong_type(f"{where}.{key}", "a string", m[key])
                msg[key] = m[key]
        out.append(msg)
    prefill = ""
    if out[-1]["role"] == "assistant" and not out[-1].get("tool_calls"):
        prefill = out.pop()["content"]
        if not out:
            raise invalid("messages", "a conversation cannot consist of an assistant message alone")
    return out, prefill


def _tool_result(m: dict, where: str, role: str) -> dict:
    """A `tool` message (or the legacy `function` role: its `name` stands for the call)."""
    msg: dict = {"role": "tool", "content": _content(m.get("content"), f"{where}.content", role)}
    if role == "tool":
        call_id = m.get("tool_call_id")
        if call_id is None:
            raise ApiError(400, f"Missing required parameter: '{where}.tool_call_id'.",
                           param=f"{where}.tool_call_id", code="missing_required_parameter")
        if not isinstance(call_id, str):
            raise wrong_type(f"{where}.tool_call_id", "a string", call_id)
        msg["tool_call_id"] = call_id
    name = m.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise wrong_type(f"{where}.name", "a string", name)
        msg["name"] = name
    elif role == "function":
        raise ApiError(400, f"Missing required parameter: '{where}.name'.", param=f"{where}.name",
                       code="missing_required_parameter")
    return msg


def _calls(m: dict, where: str) -> list[dict] | None:
    """An assistant message's tool_calls (or legacy function_call) for the template, or None."""
    raw = m.get("tool_calls")
    key = "tool_calls"
    if raw is None and m.get("function_call") is not None:
        raw, key = [{"id": "", "type": "function", "function": m["function_call"]}], "function_call"
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise wrong_type(f"{where}.tool_calls", "an array", raw)
    out = []
    for j, call in enumerate(raw):
        cw = f"{where}.tool_calls[{j}]" if key == "tool_calls" else f"{where}.function_call"
        if not isinstance(call, dict):
            raise wrong_type(cw, "an object", call)
        fn = call.get("function")
        fw = f"{cw}.function" if key == "tool_calls" else cw
        if not isinstance(fn, dict):
            raise wrong_type(fw, "an object", fn)
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise wrong_type(f"{fw}.name", "a non-empty string", name)
        args = fn.get("arguments", "{}")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError as e:
                raise invalid(f"{fw}.arguments", f"Invalid '{fw}.arguments': not valid JSON ({e}).") from None
        if not isinstance(args, dict):
            raise wrong_type(f"{fw}.arguments", "a JSON object (as a string)", args)
        call_id = call.get("id", "")
        if not isinstance(call_id, str):
            raise wrong_type(f"{cw}.id", "a string", call_id)
        out.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}})
    return out


def _content(value: object, where: str, role: str) -> str:
    if value is None:
        if role == "assistant":
            return ""
        raise ApiError(400, f"Missing required parameter: '{where}'.", param=where, code="missing_required_parameter")
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise wrong_type(where, "a string or an array of content parts", value)
    parts = []
    for j, part in enumerate(value):
        pw = f"{where}[{j}]"
        if isinstance(part, str):  # tolerated: some clients send bare strings
            parts.append(part)
            continue
        if not isinstance(part, dict):
            raise wrong_type(pw, "an object", part)
        kind = part.get("type")
        if kind not in ("text", "input_text"):
            raise unsupported(f"{pw}.type", f"{kind!r} content: the models are text-only")
        text = part.get("text")
        if not isinstance(text, str):
            raise wrong_type(f"{pw}.text", "a string", text)
        parts.append(text)
    return "".join(parts)


def parse_prompt(value: object, n_vocab: int | None = None) -> str | list[int]:
    """/v1/completions `prompt`: a string, token ids, or a batch of exactly one of those.

    Token ids must name tokens of both models (`n_vocab`, the smaller vocabulary): one past
    it makes llama_decode fail and one past int32 an OverflowError inside llama.cpp's
    bindings, both after the request was accepted."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
        value = value[0]  # a batch of one (what some clients always send)
    if isinstance(value, str):
        if not value:
            raise invalid("prompt", "'prompt' is empty: nothing to complete.")
        return value
    if isinstance(value, list):
        if not value:
            raise invalid("prompt", "'prompt' is empty: nothing to complete.")
        if all(isinstance(t, int) and not isinstance(t, bool) for t in value):
            top = (n_vocab or 2**31) - 1
            for i, t in enumerate(value):
                if not 0 <= t <= top:
                    shown = t if abs(t) < 10**12 else f"{str(t)[:8]}..."
                    raise invalid("prompt", f"Invalid 'prompt': token id {shown} at index {i} is not in the "
                                  f"vocabulary (ids 0..{top}).")
            return list(value)
        if all(isinstance(t, str | list) for t in value):
            raise unsupported("prompt", "batched prompts (one answer per request; send one request per prompt)")
    raise wrong_type("prompt", "a string or an array of token ids", value)
