"""How a job's events become the HTTP reply: one JSON body (`collect`) or an event stream (`sse`).

Both read the worker's items (("text", ...), logprob items, then ("done", ...), ("error", e)
or ("cancelled",)), build the chat shapes (stream.py, infill.py's for /infill), apply tool
calls (tool_output.py) and hand each body or chunk to the route's dialect (dialect.py). A
non-streaming client that goes away is noticed within POLL_SECONDS (`next_item`); a stream's
end, however it ends, cancels its job (`JobStream`). app.py holds the routes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from localspec.errors import ContextFullError, LocalspecError
from localspec.server.dialect import Dialect, Translator
from localspec.server.errors import ApiError
from localspec.server.infill import InfillShapes
from localspec.server.logprobs import Scores
from localspec.server.metrics import Metrics
from localspec.server.schema import GenRequest
from localspec.server.stream import Shapes, add_segment, trim_tokens
from localspec.server.tool_output import ToolStream
from localspec.server.tool_output import apply as apply_tool_calls
from localspec.server.worker import Job, ShuttingDown

POLL_SECONDS = 0.25  # how often a waiting non-streaming request checks that its client is still there


class ClientGone(Exception):
    """The HTTP client disconnected while its request waited or ran."""


class JobStream(StreamingResponse):
    """A streaming response that cancels its job however the stream ends (done, client gone,
    server stopping), even when the body iterator never started."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()  # a no-op once the job has finished


async def next_item(job: Job, request: Request) -> tuple:
    """The job's next item; raises ClientGone if the client disconnects while waiting or
    while items keep coming (checked at most every POLL_SECONDS either way: a non-streaming
    client that gives up must stop its generation even when tokens flow without a pause)."""
    now = time.monotonic()
    if now - getattr(request.state, "polled", 0.0) >= POLL_SECONDS:  # the first call checks too
        request.state.polled = now
        if await request.is_disconnected():
            raise ClientGone()
    getter = asyncio.ensure_future(job.items.get())
    try:
        while True:
            done, _ = await asyncio.wait({getter}, timeout=POLL_SECONDS)
            if done:
                return getter.result()
            request.state.polled = time.monotonic()
            if await request.is_disconnected():
                raise ClientGone()
    finally:
        if not getter.done():
            getter.cancel()


def shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", type="server_error", code="shutting_down")


def failed(item: tuple, req: GenRequest, dialect: Dialect) -> Response:
    """The response for a job that produced ("error", e) or ("cancelled",) instead of a start."""
    if item[0] == "cancelled":
        return Response(status_code=499)
    return dialect.refuse(_error_for(item[1], req))


def _error_for(e: BaseException, req: GenRequest) -> ApiError:
    param = {"chat": "messages", "infill": "input_prefix"}.get(req.kind, "prompt")
    if isinstance(e, ContextFullError):
        return ApiError(400, str(e), param=param, code="context_length_exceeded")
    if isinstance(e, LocalspecError):
        return ApiError(400, str(e), code="invalid_value")
    if isinstance(e, ShuttingDown):
        return shutting_down()
    return ApiError(500, f"engine failure: {type(e).__name__}: {e}", type="server_error", code="engine_error")


def _scores(req: GenRequest) -> Scores:
    return Scores(req.prompt, req.kind == "chat", req.logprobs, req.echo, req.cfg.prompt_logprobs is not None)


async def collect(job: Job, request: Request, shapes: Shapes | InfillShapes, metrics: Metrics, dialect: Dialect,
                   out: Translator) -> Response:
    segments: list[dict] = []
    scores = _scores(shapes.req)
    while True:
        item = await next_item(job, request)
        if scores.consume(item):
            continue
        if item[0] == "text":
            add_segment(segments, item[2], item[1], item[3], *item[4:])
            continue
        metrics.record(job.id, item)
        if item[0] == "done":
            trim_tokens(segments, item[1].stats.n_tokens)  # provenance counts what usage counts
            body = shapes.response(item[1], job.queue_seconds, segments, item[2], scores.whole(), scores.prefix)
            if shapes.req.tools is not None:  # the answer's tool calls (server/tool_output.py)
                apply_tool_calls(body, shapes.req)
            return JSONResponse(out.response(body))
        return failed(item, shapes.req, dialect)


async def sse(job: Job, shapes: Shapes | InfillShapes, metrics: Metrics, out: Translator) -> AsyncIterator[str]:
    """The event stream: text as the worker produces it, coalesced when the client is slower;
    `out` turns the chat chunks into the route's own events (dialect.py)."""
    first = shapes.first()
    if first is not None:
        for line in out.chunk(first):
            yield line
    segments: list[dict] = []  # tokens whose text is still held back wait for the next chunk
    scores = _scores(shapes.req)
    tools = ToolStream(shapes.req) if shapes.req.tools is not None else None
    while True:
        echo = scores.echo_now()  # a completion's echoed prompt: the first text, once it is known
        if echo is not None:
            for line in out.chunk(shapes.text_chunk(echo, scores.take())):
                yield line
        items = [await job.items.get()]
        while not job.items.empty():
            items.append(job.items.get_nowait())
        end: tuple | None = None
        for item in items:
            if scores.consume(item):
                echo = scores.echo_now()
                if echo is not None:
                    for line in out.chunk(shapes.text_chunk(echo, scores.take())):
                        yield line
            elif item[0] == "text":
                add_segment(segments, item[2], item[1], item[3], *item[4:])
            else:
                end = item
                break
        if any(s["text"] for s in segments):
            lps = scores.take()
            for chunk in tools.delta(shapes, segments, lps) if tools else [shapes.delta(segments, lps)]:
                for line in out.chunk(chunk):
                    yield line
            segments = []
        if end is None:
            continue
        metrics.record(job.id, end)
        lines: list[str] = []
        if end[0] == "done":
            chunks = shapes.final(end[1], job.queue_seconds, scores.take())
            for chunk in tools.final(shapes, chunks) if tools else chunks:
                lines += out.chunk(chunk)
        elif end[0] == "error":  # after the 200 went out: report in-stream, as llama-server does
            lines += out.error(_error_for(end[1], shapes.req))
        for line in lines + out.end():
            yield line
        return
