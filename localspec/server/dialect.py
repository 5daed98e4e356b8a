"""Which API a route speaks: how its errors look and how chat bodies become its bodies.

`/v1/chat/completions` is the server's one generation path (schema.py parses, the worker
runs, stream.py shapes OpenAI chat bodies and chunks). The Anthropic Messages API
(`/v1/messages`) and OpenAI's Responses API (`/v1/responses`) are adapters on both ends:
their request is translated into a chat request before it is parsed, and what the chat
path produces (a `chat.completion`, or `chat.completion.chunk`s) is translated back by a
per-request Translator. So slots, metrics, sampling defaults, provenance and tool calls
behave the same on every route, and a change to the chat path reaches all three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from starlette.responses import JSONResponse

from localspec.server.errors import ApiError
from localspec.server.schema import GenRequest
from localspec.server.stream import DONE_LINE, sse


class Translator(Protocol):
    """Turns one request's chat bodies into another API's (stateful for a stream)."""

    def response(self, body: dict) -> dict:
        """A whole `chat.completion` -> this API's response body."""
        ...

    def chunk(self, chunk: dict) -> list[str]:
        """A `chat.completion.chunk` -> this API's server-sent events (maybe none)."""
        ...

    def error(self, e: ApiError) -> list[str]:
        """A failure after the 200 went out, as in-stream events."""
        ...

    def end(self) -> list[str]:
        """What closes the stream after the last chunk (or after an error)."""
        ...


class OpenAIChat:
    """The chat path's own shapes, unchanged."""

    def response(self, body: dict) -> dict:
        return body

    def chunk(self, chunk: dict) -> list[str]:
        return [sse(chunk)]

    def error(self, e: ApiError) -> list[str]:
        return [sse(e.body())]  # as llama-server: an error object, then [DONE]

    def end(self) -> list[str]:
        return [DONE_LINE]


@dataclass(frozen=True)
class Dialect:
    """A route's API: its error responses, and a Translator per parsed request
    (given the request and the model id responses name)."""

    refuse: Callable[[ApiError], JSONResponse]
    translator: Callable[[GenRequest, str], Translator]


class LlamaCompletion(OpenAIChat):
    """llama-server's /completion stream (what /infill streams): one object per event, and
    no `[DONE]` at the end."""

    def end(self) -> list[str]:
        return []


OPENAI = Dialect(refuse=ApiError.response, translator=lambda req, model: OpenAIChat())
INFILL = Dialect(refuse=ApiError.response, translator=lambda req, model: LlamaCompletion())


def event(name: str, data: dict) -> str:
    """One named server-sent event (Anthropic's and the Responses API's streams name theirs)."""
    return f"event: {name}\n" + sse(data)
