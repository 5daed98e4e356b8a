"""How much prompt a request may bring, checked on arrival, before it queues or tokenizes.

The context check proper (the prompt's tokens against `--ctx`) can only come after the
prompt is rendered and tokenized, and that work grows with the text: 100,000 messages in
3.4 MB once kept a slot busy for minutes before the context check refused them. So two
bounds that no prompt which fits the context can break are checked first, in the handler:

- at most `n_ctx` messages (each renders to at least one token);
- at most `BYTES_PER_TOKEN` × `n_ctx` bytes (UTF-8) of text: a /v1/completions prompt,
  or the messages' text fields (content, name, reasoning_content, past tool calls as JSON)
  with the prefill and the tools the template renders.
  A token holds 3 to 5 bytes of real text (English, code, CJK alike), so 16 is four times
  what any real prompt needs: it only refuses what could never fit.

Both answer 400 `context_length_exceeded`, the code the context check itself answers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from localspec.server.errors import ApiError

BYTES_PER_TOKEN = 16
TEXT_FIELDS = ("content", "name", "reasoning_content")


def max_bytes(n_ctx: int) -> int:
    return BYTES_PER_TOKEN * n_ctx


def check_message_count(value: object, n_ctx: int) -> None:
    """Before the messages are read one by one: more than n_ctx cannot fit."""
    if isinstance(value, list) and len(value) > n_ctx:
        raise _too_long("messages", f"{len(value):,} messages cannot fit in a context of {n_ctx:,} tokens "
                        "(each message takes at least one)")


def check_chat_bytes(messages: Sequence[dict], prefill: str, n_ctx: int, tools: object = None) -> None:
    """The messages' text, as the template will get it, against BYTES_PER_TOKEN × n_ctx
    (`tools`: what the template renders besides them)."""
    limit = max_bytes(n_ctx)
    total = _utf8_len(prefill) + (_utf8_len(json.dumps(tools, ensure_ascii=False)) if tools else 0)
    for m in messages:
        for key in TEXT_FIELDS:
            value = m.get(key)
            if isinstance(value, str):
                total += _utf8_len(value)
        if m.get("tool_calls"):
            total += _utf8_len(json.dumps(m["tool_calls"], ensure_ascii=False))
        if total > limit:
            break
    if total > limit:
        raise _too_long("messages", _bytes_message("the messages' text", total, n_ctx))


def check_prompt(prompt: str | list[int], n_ctx: int) -> None:
    """A /v1/completions prompt: its bytes, or its token ids against the context itself."""
    if isinstance(prompt, str):
        size = _utf8_len(prompt)
        if size > max_bytes(n_ctx):
            raise _too_long("prompt", _bytes_message("the prompt", size, n_ctx))
    elif len(prompt) >= n_ctx:
        raise _too_long("prompt", f"the prompt has {len(prompt):,} tokens but the context holds {n_ctx:,}: "
                        "shorten it or raise --ctx")


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _bytes_message(what: str, size: int, n_ctx: int) -> str:
    return (f"{what} holds {size:,} bytes, more than a context of {n_ctx:,} tokens can take "
            f"({BYTES_PER_TOKEN} bytes per token at most, {max_bytes(n_ctx):,} in all): shorten it or raise --ctx")


def _too_long(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="context_length_exceeded")
