"""`messages` and `prompt` -> the session's Prompt (chat messages, text or token ids).

Chat clients send more than `{role, content}` strings: content as a list of parts (Continue,
Open WebUI), a `developer` role (newer SDKs), a `name`. Text parts are joined; anything that
is not text (images, audio) or belongs to tool calling is refused with the exact path of the
offending field (`messages[2].content[1].type`). A last message from the assistant is a
prefill, as in llama-server: the answer continues it.
"""

from __future__ import annotations

from localspec.server.errors import ApiError, invalid, unsupported, wrong_type
from localspec.server.fields import check_keys

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_MESSAGE_KEYS = frozenset({"role", "content", "name", "refusal", "reasoning_content", "tool_calls",
                           "tool_call_id", "function_call", "audio"})
_TOOL_KEYS = ("tool_calls", "tool_call_id", "function_call", "audio")


def parse_messages(value: object, lenient: bool, ignored: list[str]) -> tuple[list[dict[str, str]], str]:
    """Validated messages for the chat template, and the prefill (a trailing assistant turn)."""
    if not isinstance(value, list):
        raise wrong_type("messages", "an array", value)
    if not value:
        raise invalid("messages", "'messages' must contain at least one message.", code="empty_array")
    out: list[dict[str, str]] = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise wrong_type(where, "an object", m)
        check_keys(m, _MESSAGE_KEYS, where, lenient, ignored)
        role = m.get("role")
        if not isinstance(role, str):
            raise wrong_type(f"{where}.role", "a string", role)
        if role in ("tool", "function"):
            raise unsupported(f"{where}.role", f"'{role}' messages belong to tool calling, which is not built")
        if role not in _ROLES:
            raise invalid(f"{where}.role", f"Invalid value for '{where}.role': {role!r} "
                          "(one of system, developer, user, assistant)")
        for key in _TOOL_KEYS:
            if m.get(key):
                raise unsupported(f"{where}.{key}", "tool calling and audio are not built")
        msg = {"role": _ROLES[role], "content": _content(m.get("content"), f"{where}.content", role)}
        for key in ("name", "reasoning_content"):
            if m.get(key) is not None:
                if not isinstance(m[key], str):
                    raise wrong_type(f"{where}.{key}", "a string", m[key])
                msg[key] = m[key]
        out.append(msg)
    prefill = ""
    if out[-1]["role"] == "assistant":
        prefill = out.pop()["content"]
        if not out:
            raise invalid("messages", "a conversation cannot consist of an assistant message alone")
    return out, prefill


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
