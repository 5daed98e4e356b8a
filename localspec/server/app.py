"""The ASGI app: routes, auth, and the bridge from HTTP to the worker.

Around the routes: guard.py (Host / Origin rules, CORS), body.py (what a body may be),
metrics.py (`/metrics`, fed from each request's Done stats).

Starlette, not FastAPI: the server is four routes whose validation is a hand-written policy
(fields.py) that must answer in OpenAI's error shape and name OpenAI's `param`, which is
what FastAPI's pydantic layer would have to be talked out of; streaming, lifespan and error
handlers are Starlette's own either way. uvicorn runs it (cli.py, and the tests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from localspec.errors import ContextFullError, LocalspecError
from localspec.server.anthropic_in import count_tokens as count_tokens_of
from localspec.server.anthropic_in import parse_anthropic, parse_count
from localspec.server.anthropic_out import ANTHROPIC
from localspec.server.body import read_json
from localspec.server.dialect import INFILL, OPENAI, Dialect, Translator
from localspec.server.errors import ApiError
from localspec.server.guard import Guard
from localspec.server.hosts import LOOPBACK_NAMES
from localspec.server.infill import InfillShapes, parse_infill, supersede_key
from localspec.server.logprobs import Scores
from localspec.server.metrics import CONTENT_TYPE, CountStatuses, Metrics
from localspec.server.responses_in import parse_responses
from localspec.server.responses_out import RESPONSES
from localspec.server.schema import GenRequest, Limits, parse_chat, parse_completion
from localspec.server.stream import Shapes, add_segment, trim_tokens
from localspec.server.tool_output import ToolStream
from localspec.server.tool_output import apply as apply_tool_calls
from localspec.server.tools import detect_format
from localspec.server.worker import Job, QueueFull, ShuttingDown, Worker
from localspec.session import Session

log = logging.getLogger("localspec.server")

POLL_SECONDS = 0.25  # how often a waiting non-streaming request checks that its client is still there
MAX_BODY = 4 * 1024 * 1024


@dataclass
class ServerConfig:
    """Everything the app needs besides the session."""

    model_id: str
    limits: Limits
    draft: str | None = None
    api_key: str | None = None
    max_queue: int = 16
    max_body: int = MAX_BODY
    # Host names served (None: any) and web origins allowed (None: any); hosts.py builds
    # both from --host / --allowed-hosts / --cors. The defaults suit a loopback bind.
    allowed_hosts: frozenset[str] | None = LOOPBACK_NAMES
    cors: frozenset[str] | None = frozenset()
    # False (--no-special-in-content): message text is tokenized as plain text, so a
    # `<|im_start|>` a user writes is never the control token (runtime.RuntimeSession)
    special_in_content: bool = True


class ClientGone(Exception):
    """The HTTP client disconnected while its request waited or ran."""


def create_app(session: Session, config: ServerConfig, pool: object = None) -> Starlette:
    """A Starlette app serving `session` (with `pool`, a localspec.pool.Pool, its N slots:
    `session` is then the pool's base); the slot threads live as long as the app runs."""
    worker = Worker(session, config.max_queue, pool)
    if not config.special_in_content:
        for s in (session, *worker.sessions):
            if not hasattr(s, "special_in_content"):
                raise LocalspecError("--no-special-in-content: this session cannot keep message text plain")
            s.special_in_content = False
    metrics = Metrics(config.model_id)
    limits = config.limits
    if limits.n_vocab is None:  # token-id prompts are checked against both models' vocabulary
        limits = dataclasses.replace(limits, n_vocab=getattr(session, "n_vocab", None))
    if limits.tool_format is None:  # how the chat template writes tool calls (None: it renders no tools)
        limits = dataclasses.replace(limits, tool_format=detect_format(session))
    # FIM requests: the model's FIM tokens, and each client's latest one (server/infill.py)
    limits = dataclasses.replace(limits, fim_missing=tuple(getattr(session, "fim_missing", ("pre", "suf", "mid"))))
    latest: dict[str, Job] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, worker.close)
            metrics.close()

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "busy": worker.busy, "queued": worker.queued,
                             "queue_max": worker.max_queue, "slots": worker.slots(),
                             "localspec": _health_info(session, pool)})

    async def slots(request: Request) -> Response:
        """llama-server's /slots: what each slot does (behind the API key, as there)."""
        try:
            _auth(request, config.api_key)
        except ApiError as e:
            return e.response()
        return JSONResponse(worker.slots())

    async def models(request: Request) -> Response:
        try:
            _auth(request, config.api_key)
        except ApiError as e:
            return e.response()
        return JSONResponse({"object": "list", "data": [{
            "id": config.model_id, "object": "model", "created": int(time.time()), "owned_by": "localspec",
            "localspec": {"draft": config.draft, "n_ctx": config.limits.n_ctx, "method": config.limits.cfg.method},
        }]})

    async def prometheus(request: Request) -> Response:
        try:
            _auth(request, config.api_key)  # as llama-server: only /health (and models) are public
        except ApiError as e:
            return e.response()
        text = metrics.render(running=int(worker.busy), waiting=worker.queued, queue_max=worker.max_queue)
        return Response(text, headers={"Content-Type": CONTENT_TYPE})

    async def chat(request: Request) -> Response:
        return await _generate(request, parse_chat)

    async def completions(request: Request) -> Response:
        return await _generate(request, parse_completion)

    async def messages(request: Request) -> Response:
        return await _generate(request, parse_anthropic, ANTHROPIC)

    async def responses(request: Request) -> Response:
        return await _generate(request, parse_responses, RESPONSES)

    async def infill(request: Request) -> Response:
        return await _generate(request, parse_infill, INFILL)

    async def count_tokens(request: Request) -> Response:
        """Anthropic's token count: the prompt rendered and tokenized, nothing generated
        (off the event loop, beside the slots: it touches no context)."""
        try:
            _auth(request, config.api_key)
            req = parse_count(await read_json(request, config.max_body), limits)
            n = await asyncio.get_running_loop().run_in_executor(None, count_tokens_of, session, req)
        except ApiError as e:
            return ANTHROPIC.refuse(e)
        except LocalspecError as e:  # a template that refuses these messages
            return ANTHROPIC.refuse(ApiError(400, str(e), code="invalid_value"))
        except ClientDisconnect:
            return Response(status_code=499)
        return JSONResponse({"input_tokens": n})

    async def _generate(request: Request, parse: Callable[[object, Limits], GenRequest],
                        dialect: Dialect = OPENAI) -> Response:
        try:
            _auth(request, config.api_key)
            req = parse(await read_json(request, config.max_body), limits)
            out = dialect.translator(req, config.model_id)
            job = Job(req, asyncio.get_running_loop())
            _supersede(job, supersede_key(req, request.client.host if request.client else None))
            try:
                worker.submit(job)
                metrics.submitted(job.id)
            except QueueFull as e:
                raise ApiError(429, f"the server is busy: {worker.max_queue} requests are already waiting; "
                               "retry later", type="rate_limit_error", code="queue_full",
                               headers={"Retry-After": str(e.retry_after)}) from None
            except ShuttingDown:
                raise _shutting_down() from None
            shapes = (InfillShapes if req.kind == "infill" else Shapes)(req, config.model_id, config.draft)
            try:
                first = await _next(job, request)
                if first[0] != "start":
                    metrics.record(job.id, first)
                    return _failed(first, req, dialect)
                if req.stream:
                    return JobStream(_sse(job, shapes, metrics, out), on_close=lambda: _abandon(job))
                return await _collect(job, request, shapes, metrics, dialect, out)
            except BaseException:
                _abandon(job)
                raise
        except ApiError as e:
            return dialect.refuse(e)
        except (ClientGone, ClientDisconnect):  # ClientDisconnect: gone while sending its body
            return Response(status_code=499)

    def _supersede(job: Job, key: str | None) -> None:
        """An editor typed on: the client's previous FIM request stops (within one iteration;
        skipped if still queued) and this one becomes its latest."""
        if key is None:
            return
        old = latest.get(key)
        latest[key] = job
        if old is not None:
            worker.cancel(old)
        for k in [k for k, j in latest.items() if j.finished and k != key]:  # forget finished clients
            del latest[k]

    def _abandon(job: Job) -> None:
        """The handler is done with `job` (finished, client gone, server stopping)."""
        worker.cancel(job)  # a no-op once the job has finished
        metrics.settle(job.id, job.items)  # counts it once its Done arrives, unless already counted

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code=code).response()

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        metrics.count_status(request.url.path, 500)  # sent outside the counting middleware
        return ApiError(500, f"internal error: {exc}", type="server_error").response()

    routes = []
    for prefix in ("/v1", ""):  # llama-server also answers without the /v1 prefix
        routes += [
            Route(f"{prefix}/models", models, methods=["GET"]),
            Route(f"{prefix}/chat/completions", chat, methods=["POST"]),
            Route(f"{prefix}/completions", completions, methods=["POST"]),
            Route(f"{prefix}/messages", messages, methods=["POST"]),
            Route(f"{prefix}/messages/count_tokens", count_tokens, methods=["POST"]),
            Route(f"{prefix}/responses", responses, methods=["POST"]),
        ]
    routes.append(Route("/infill", infill, methods=["POST"]))
    routes.append(Route("/health", health, methods=["GET"]))
    routes.append(Route("/slots", slots, methods=["GET"]))
    routes.append(Route("/metrics", prometheus, methods=["GET"]))
    middleware = [Middleware(CountStatuses, metrics=metrics),
                  Middleware(Guard, hosts=config.allowed_hosts, origins=config.cors)]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                    exception_handlers={HTTPException: http_error, Exception: server_error})
    app.state.worker = worker
    app.state.config = config
    app.state.metrics = metrics
    return app


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


# ---------------------------------------------------------------------------- helpers
def _health_info(session: Session, pool: object = None) -> dict:
    """localspec's part of /health: how far the cost model's background timing is (requests
    meanwhile run plain decoding or prompt lookups; null once it is done), and with -np N
    what the slots' shared suffix store holds."""
    progress = session.timing_progress
    info: dict = {"timing": None if progress is None else {"done": progress[0], "total": progress[1]}}
    shared = getattr(pool, "suffix", None)
    if shared is not None:
        info["suffix_shared"] = shared.info()
    return info


def _auth(request: Request, key: str | None) -> None:
    if not key:
        return
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    if not token:
        raise ApiError(401, "You didn't provide an API key: send it as 'Authorization: Bearer KEY' "
                       "(or 'x-api-key: KEY').",
                       code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(token.encode(), key.encode()):
        raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key",
                       headers={"WWW-Authenticate": "Bearer"})


async def _next(job: Job, request: Request) -> tuple:
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


def _shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", type="server_error", code="shutting_down")


def _failed(item: tuple, req: GenRequest, dialect: Dialect) -> Response:
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
        return _shutting_down()
    return ApiError(500, f"engine failure: {type(e).__name__}: {e}", type="server_error", code="engine_error")


def _scores(req: GenRequest) -> Scores:
    return Scores(req.prompt, req.kind == "chat", req.logprobs, req.echo, req.cfg.prompt_logprobs is not None)


async def _collect(job: Job, request: Request, shapes: Shapes | InfillShapes, metrics: Metrics, dialect: Dialect,
                   out: Translator) -> Response:
    segments: list[dict] = []
    scores = _scores(shapes.req)
    while True:
        item = await _next(job, request)
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
        return _failed(item, shapes.req, dialect)


async def _sse(job: Job, shapes: Shapes | InfillShapes, metrics: Metrics, out: Translator) -> AsyncIterator[str]:
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
