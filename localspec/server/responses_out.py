"""Chat answers -> OpenAI Responses API objects and events.

A `chat.completion` becomes a `response` whose `output` holds a reasoning item (a thinking
model's reasoning, as `reasoning_text` content), a message item (one `output_text` part)
and a function_call item per tool call. A chat stream becomes the Responses event
sequence, numbered by `sequence_number`:

    response.created, response.in_progress,
    per item: response.output_item.added,
      message:   content_part.added, output_text.delta..., output_text.done, content_part.done
      reasoning: content_part.added, reasoning_text.delta..., reasoning_text.done, content_part.done
      call:      function_call_arguments.delta..., function_call_arguments.done
    response.output_item.done; then response.completed (response.incomplete at the token limit)

The response repeats the request's settings (`req.settings`), as OpenAI's does; localspec's
`timings` and `localspec` objects ride on the response, per-chunk provenance on the
output_text.delta event that carries its text.
"""

from __future__ import annotations

import time

from localspec.server.apis_common import StreamEnd, extras, new_id, tool_calls
from localspec.server.dialect import Dialect, event
from localspec.server.errors import ApiError
from localspec.server.schema import GenRequest


def usage(u: dict | None) -> dict | None:
    if u is None:
        return None
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"input_tokens": u.get("prompt_tokens", 0),
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": u.get("completion_tokens", 0), "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.get("total_tokens", 0)}


def _message(item_id: str, text: str, status: str) -> dict:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def _reasoning(item_id: str, text: str, status: str) -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}]}


def _call(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


class ToResponses(StreamEnd):
    """One request's chat bodies -> Responses API objects and events."""

    def __init__(self, req: GenRequest, model: str) -> None:
        super().__init__()
        self.echo = req.settings
        self.model = model
        self.id = new_id("resp_")
        self.created = int(time.time())
        self.seq = 0
        self.items: list[dict] = []  # output items so far; the last may still be open
        self.open = False
        self.kind: object = None  # what the open item holds: "reasoning", "text" or ("tool", index)

    def _object(self, status: str, output: list[dict], u: dict | None, more: dict | None = None) -> dict:
        e = self.echo
        body = {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": None, "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": e.get("instructions"), "max_output_tokens": e.get("max_output_tokens"),
            "model": self.model, "output": output,
            "parallel_tool_calls": e.get("parallel_tool_calls") is not False,
            "previous_response_id": None, "reasoning": e.get("reasoning") or {"effort": None, "summary": None},
            "store": False, "temperature": e.get("temperature"),
            "text": e.get("text") or {"format": {"type": "text"}}, "tool_choice": e.get("tool_choice") or "auto",
            "tools": e.get("tools") or [], "top_p": e.get("top_p"), "truncation": e.get("truncation") or "disabled",
            "usage": usage(u), "metadata": e.get("metadata") or {}, "user": e.get("user"),
        }
        if status == "completed":
            body["completed_at"] = int(time.time())
        return {**body, **(more or {})}

    @staticmethod
    def _status(finish: str | None) -> str:
        return "incomplete" if finish == "length" else "completed"

    # ------------------------------------------------------------------ whole answers
    def response(self, body: dict) -> dict:
        choice = body["choices"][0]
        msg = choice["message"]
        output: list[dict] = []
        if msg.get("reasoning_content"):
            output.append(_reasoning(new_id("rs_"), msg["reasoning_content"], "completed"))
        calls = tool_calls(msg)
        if msg.get("content") or not calls:
            output.append(_message(new_id("msg_"), msg.get("content") or "", "completed"))
        output += [_call(new_id("fc_"), *call, "completed") for call in calls]
        status = self._status(choice.get("finish_reason"))
        return self._object(status, output, body.get("usage"), extras(body))

    # ------------------------------------------------------------------ streams
    def _ev(self, kind: str, data: dict) -> str:
        data = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return event(kind, data)

    def chunk(self, chunk: dict) -> list[str]:
        out: list[str] = []
        if self.seq == 0:
            start = self._object("in_progress", [], None)
            out += [self._ev("response.created", {"response": start}),
                    self._ev("response.in_progress", {"response": start})]
        provenance = (chunk.get("localspec") or {}).get("provenance") if "timings" not in chunk else None
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                out += self._to("reasoning", _reasoning(new_id("rs_"), "", "in_progress"))
                out.append(self._text_delta("response.reasoning_text.delta", delta["reasoning_content"]))
            if delta.get("content"):
                out += self._to("text", _message(new_id("msg_"), "", "in_progress"))
                out.append(self._text_delta("response.output_text.delta", delta["content"], provenance))
            for tc in delta.get("tool_calls") or []:
                fn = tc.get("function") or {}
                key = ("tool", tc.get("index", 0))
                out += self._to(key, _call(new_id("fc_"), tc.get("id") or new_id("call_"), fn.get("name", ""), "",
                                           "in_progress"))
                if fn.get("arguments"):
                    item = self.items[-1]
                    item["arguments"] += fn["arguments"]
                    out.append(self._ev("response.function_call_arguments.delta", {
                        "item_id": item["id"], "output_index": len(self.items) - 1, "delta": fn["arguments"]}))
        self.note(chunk)
        return out

    def error(self, e: ApiError) -> list[str]:
        self.failed = True
        failed = self._object("failed", self.items, self.usage)
        failed["error"] = {"code": e.code or "server_error", "message": e.message}
        return [self._ev("error", {"code": e.code, "message": e.message, "param": e.param}),
                self._ev("response.failed", {"response": failed})]

    def end(self) -> list[str]:
        if self.failed:
            return []
        out = self._close()
        if not self.items:  # an empty answer is still one (empty) message, as in a whole response
            out += self._to("text", _message(new_id("msg_"), "", "in_progress")) + self._close()
        status = self._status(self.finish)
        name = "response.completed" if status == "completed" else "response.incomplete"
        out.append(self._ev(name, {"response": self._object(status, self.items, self.usage, self.extras)}))
        return out

    def _text_delta(self, kind: str, text: str, provenance: list | None = None) -> str:
        item = self.items[-1]
        item["content"][0]["text"] += text
        data: dict = {"item_id": item["id"], "output_index": len(self.items) - 1, "content_index": 0, "delta": text}
        if kind == "response.output_text.delta":
            data["logprobs"] = []
        if provenance is not None:
            data["localspec"] = {"provenance": provenance}
        return self._ev(kind, data)

    def _to(self, kind: object, item: dict) -> list[str]:
        """Open an output item of `kind` unless it is the open one (closing that first)."""
        if self.open and kind == self.kind:
            return []
        out = self._close()
        self.items.append(item)
        self.open, self.kind = True, kind
        index = len(self.items) - 1
        added = {**item, "content": []} if "content" in item else dict(item)
        out.append(self._ev("response.output_item.added", {"output_index": index, "item": added}))
        if "content" in item:
            out.append(self._ev("response.content_part.added", {"item_id": item["id"], "output_index": index,
                                                                "content_index": 0, "part": item["content"][0]}))
        return out

    def _close(self) -> list[str]:
        if not self.open:
            return []
        self.open = False
        item = self.items[-1]
        item["status"] = "completed"
        index = len(self.items) - 1
        where = {"item_id": item["id"], "output_index": index}
        out = []
        if item["type"] == "function_call":
            out.append(self._ev("response.function_call_arguments.done",
                                {**where, "name": item["name"], "arguments": item["arguments"]}))
        else:
            part = item["content"][0]
            done = "response.output_text.done" if item["type"] == "message" else "response.reasoning_text.done"
            data = {**where, "content_index": 0, "text": part["text"]}
            if item["type"] == "message":
                data["logprobs"] = []
            out += [self._ev(done, data),
                    self._ev("response.content_part.done", {**where, "content_index": 0, "part": part})]
        out.append(self._ev("response.output_item.done", {"output_index": index, "item": item}))
        return out


RESPONSES = Dialect(refuse=ApiError.response, translator=ToResponses)
