"""Chat answers -> Anthropic Messages API bodies, events and errors.

A `chat.completion` becomes a `message` (content blocks: thinking, then text, then one
tool_use per call); a chat stream becomes Anthropic's event sequence, which the SDK
checks block by block:

    message_start, ping,
    (content_block_start, content_block_delta..., content_block_stop) per block,
    message_delta (stop_reason, stop_sequence, usage), message_stop

Blocks are opened as the chat chunks bring their kind (reasoning_content -> thinking,
content -> text, each tool_calls index -> tool_use with input_json_delta pieces) and
closed when the next kind starts. localspec's extension rides along: per-chunk
provenance on the delta event that carries its text, `timings` and the `localspec` object
on the message (the message_delta event when streaming).
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from localspec.server.apis_common import StreamEnd, extras, json_object, new_id, tool_calls
from localspec.server.dialect import Dialect, event
from localspec.server.errors import ApiError
from localspec.server.schema import GenRequest

# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors)
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 415: "invalid_request_error",
               429: "rate_limit_error", 503: "overloaded_error"}


def error_body(e: ApiError) -> dict:
    kind = ERROR_TYPES.get(e.status, "invalid_request_error" if e.status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": e.message}}


def refuse(e: ApiError) -> JSONResponse:
    return JSONResponse(error_body(e), status_code=e.status, headers=e.headers)


def stop_reason(finish: str | None, info: dict) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) from the chat answer's finish_reason and localspec object."""
    if finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    if info.get("stop_reason") == "stop":
        return "stop_sequence", info.get("stop_word") or None
    return "end_turn", None


def usage(u: dict | None) -> dict:
    """Anthropic counts cache reads apart: input_tokens + cache_read_input_tokens is the prompt."""
    u = u or {}
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": u.get("prompt_tokens", 0) - cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "output_tokens": u.get("completion_tokens", 0)}


class ToMessages(StreamEnd):
    """One request's chat bodies -> Messages API bodies and events."""

    def __init__(self, req: GenRequest, model: str) -> None:
        super().__init__()
        self.model = model
        self.id = new_id("msg_")
        self.started = False
        self.index = -1  # content block index; -1: none yet
        self.open: object = None  # the open block: "thinking", "text" or ("tool", its tool_calls index)

    # ------------------------------------------------------------------ whole answers
    def response(self, body: dict) -> dict:
        choice = body["choices"][0]
        msg = choice["message"]
        content: list[dict] = []
        if msg.get("reasoning_content"):
            content.append({"type": "thinking", "thinking": msg["reasoning_content"], "signature": ""})
        if msg.get("content"):
            content.append({"type": "text", "text": msg["content"]})
        for call_id, name, args in tool_calls(msg):
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": json_object(args)})
        reason, seq = stop_reason(choice.get("finish_reason"), body.get("localspec") or {})
        return {"id": self.id, "type": "message", "role": "assistant", "content": content, "model": self.model,
                "stop_reason": reason, "stop_sequence": seq, "usage": usage(body.get("usage")), **extras(body)}

    # ------------------------------------------------------------------ streams
    def chunk(self, chunk: dict) -> list[str]:
        out: list[str] = []
        if not self.started:
            self.started = True
            message = {"id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
                       "stop_reason": None, "stop_sequence": None, "usage": usage(None)}
            out += [event("message_start", {"type": "message_start", "message": message}),
                    event("ping", {"type": "ping"})]
        last: dict | None = None  # the delta event that gets this chunk's provenance
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._to("thinking", {"type": "thinking", "thinking": "", "signature": ""})
                last = {"type": "thinking_delta", "thinking": delta["reasoning_content"]}
                out.append(self._delta(last))
            if delta.get("content"):
                out += self._to("text", {"type": "text", "text": ""})
                last = {"type": "text_delta", "text": delta["content"]}
                out.append(self._delta(last))
            for tc in delta.get("tool_calls") or []:
                fn = tc.get("function") or {}
                out += self._to(("tool", tc.get("index", 0)), {"type": "tool_use", "id": tc.get("id") or new_id("toolu_"),
                                                               "name": fn.get("name", ""), "input": {}})
                if fn.get("arguments"):
                    last = {"type": "input_json_delta", "partial_json": fn["arguments"]}
                    out.append(self._delta(last))
        provenance = (chunk.get("localspec") or {}).get("provenance")
        if provenance is not None and last is not None and "timings" not in chunk:
            out[-1] = self._delta(last, {"localspec": {"provenance": provenance}})
        self.note(chunk)
        return out

    def error(self, e: ApiError) -> list[str]:
        self.failed = True
        return [event("error", error_body(e))]

    def end(self) -> list[str]:
        if self.failed:
            return []
        out = self._close()
        reason, seq = stop_reason(self.finish, self.extras.get("localspec") or {})
        out.append(event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": reason, "stop_sequence": seq},
                                           "usage": usage(self.usage), **self.extras}))
        out.append(event("message_stop", {"type": "message_stop"}))
        return out

    def _to(self, kind: object, block: dict) -> list[str]:
        """Open a block of `kind` unless it is the open one (closing the open one first)."""
        if kind == self.open and self.index >= 0:
            return []
        out = self._close()
        self.index += 1
        self.open = kind
        return out + [event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                    "content_block": block})]

    def _close(self) -> list[str]:
        if self.open is None:
            return []
        self.open = None
        return [event("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _delta(self, delta: dict, more: dict | None = None) -> str:
        return event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta,
                                             **(more or {})})


ANTHROPIC = Dialect(refuse=refuse, translator=ToMessages)
