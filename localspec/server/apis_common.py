"""What the Messages and Responses adapters share: typed reads that name the offending
field in a 400, text from content parts, function tools in the chat route's shape, and
the tool calls of a chat answer."""

from __future__ import annotations

import json
import secrets

from localspec.server.errors import ApiError, unsupported, wrong_type
from localspec.server.fields import check_keys


def ensure_object(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise wrong_type(where, "an object", value)
    return value


def ensure_list(value: object, where: str, expected: str = "an array") -> list:
    if not isinstance(value, list):
        raise wrong_type(where, expected, value)
    return value


def ensure_items(value: object, where: str, expected: str) -> list:
    """A non-empty array (of messages, of input items)."""
    items = ensure_list(value, where, expected)
    if not items:
        raise ApiError(400, f"'{where}' must contain at least one item.", param=where, code="empty_array")
    return items


def ensure_str(value: object, where: str) -> str:
    if value is None:
        raise ApiError(400, f"{where}: Field required", param=where, code="missing_required_parameter")
    if not isinstance(value, str):
        raise wrong_type(where, "a string", value)
    return value


def text_of(parts: object, where: str, kinds: tuple[str, ...], why: str) -> str:
    """The joined text of content parts whose `type` is one of `kinds` (anything else is
    a 400 naming the part: images, audio and files are refused, the models are text-only)."""
    out = []
    for j, part in enumerate(ensure_list(parts, where, "a string or an array of content parts")):
        pw = f"{where}[{j}]"
        part = ensure_object(part, pw)
        kind = part.get("type")
        if kind not in kinds:
            if not isinstance(kind, str):
                raise wrong_type(f"{pw}.type", "a string", kind)
            raise unsupported(f"{pw}.type", f"{kind!r} content: {why}")
        out.append(ensure_str(part.get("text"), f"{pw}.text"))
    return "".join(out)


def chat_tools(tools: list[tuple[str, str | None, dict]], strict: list[bool | None] | None = None) -> list[dict]:
    """(name, description, JSON schema) -> the chat route's function tools."""
    out = []
    for i, (name, desc, params) in enumerate(tools):
        fn: dict = {"name": name}  # OpenAI's own key order: the template renders the tool as JSON
        if desc is not None:
            fn["description"] = desc
        fn["parameters"] = params
        if strict is not None and strict[i] is not None:
            fn["strict"] = strict[i]
        out.append({"type": "function", "function": fn})
    return out


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


def tool_calls(message: dict) -> list[tuple[str, str, str]]:
    """(call id, name, JSON arguments) of a chat answer's tool calls."""
    out = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") or {}
        out.append((tc.get("id") or new_id("call_"), fn.get("name", ""), fn.get("arguments") or "{}"))
    return out


def json_object(arguments: str) -> dict:
    """Tool arguments as an object (Anthropic's `input`); arguments that are not a JSON
    object (a call the model wrote badly) become {} as llama-server does, never a 500."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def extras(body: dict) -> dict:
    """localspec's fields of a chat body (timings, the `localspec` object) to carry over."""
    return {k: body[k] for k in ("timings", "localspec") if k in body}


def format_of(value: object, where: str, other: str, ignored: list[str]) -> dict | None:
    """The `format` object of Anthropic's output_config / the Responses API's text field;
    their other key (`effort`, `verbosity`) has no counterpart here and is listed as ignored."""
    if value is None:
        return None
    holder = ensure_object(value, where)
    check_keys(holder, frozenset({"format", other}), where, False, ignored)
    if holder.get(other) is not None:
        ignored.append(f"{where}.{other}")
    fmt = holder.get("format")
    return None if fmt is None else ensure_object(fmt, f"{where}.format")


class StreamEnd:
    """What a stream translator keeps for its closing events: the finish_reason, usage
    and localspec's extras of the last chat chunks, and whether an error ended it."""

    def __init__(self) -> None:
        self.finish: str | None = None
        self.usage: dict | None = None
        self.extras: dict = {}
        self.failed = False

    def note(self, chunk: dict) -> None:
        for choice in chunk.get("choices") or []:
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        self.extras.update(extras(chunk))


def renamed(e: ApiError, names: dict[str, str]) -> ApiError:
    """An error of the chat route about a field this API calls otherwise (`max_tokens` is the
    Responses API's `max_output_tokens`), told in the client's own names."""
    param = e.param or ""
    for chat_name, own in names.items():
        if param == chat_name or param.startswith(chat_name + "."):
            new = own + param[len(chat_name):]
            e.message = e.message.replace(f"'{param}'", f"'{new}'").replace(f"'{chat_name}'", f"'{own}'")
            e.param = new
            break
    return e
