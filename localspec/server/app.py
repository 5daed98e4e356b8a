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
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from localspec.errors import LocalspecError
from localspec.server.anthropic_in import count_tokens as count_tokens_of
from localspec.server.anthropic_in import parse_anthropic, parse_count
from localspec.server.anthropic_out import ANTHROPIC
from localspec.server.body import read_json
from localspec.server.dialect import INFILL, OPENAI, Dialect
from localspec.server.errors import ApiError
from localspec.server.fim_hint import previous_answer_hint
from localspec.server.guard import Guard
from localspec.server.hosts import LOOPBACK_NAMES
from localspec.server.infill import InfillShapes, parse_infill, supersede_key
from localspec.server.metrics import CONTENT_TYPE, CountStatuses, Metrics
from localspec.server.replies import (
    ClientGone,
    JobStream,
    collect,
    failed,
    next_item,
    shutting_down,
    sse,
)
from localspec.server.responses_in import parse_responses
from localspec.server.responses_out import RESPONSES
from localspec.server.schema import GenRequest, Limits, parse_chat, parse_completion
from localspec.server.stream import Shapes
from localspec.server.tools import detect_format
from localspec.server.worker import Job, QueueFull, ShuttingDown, Worker
from localspec.session import Session

log = logging.getLogger("localspec.server")

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
    prefetch: bool = True  # FIM: evaluate the likely next prompt while idle (server/fim_prefetch.py)
    # Host names served (None: any) and web origins allowed (None: any); hosts.py builds
    # both from --host / --allowed-hosts / --cors. The defaults suit a loopback bind.
    allowed_hosts: frozenset[str] | None = LOOPBACK_NAMES
    cors: frozenset[str] | None = frozenset()
    # False (--no-special-in-content): message text is tokenized as plain text, so a
    # `<|im_start|>` a user writes is never the control token (runtime.RuntimeSession)
    special_in_content: bool = True


def create_app(session: Session, config: ServerConfig, pool: object = None) -> Starlette:
    """A Starlette app serving `session` (with `pool`, a localspec.pool.Pool, its N slots:
    `session` is then the pool's base); the slot threads live as long as the app runs."""
    worker = Worker(session, config.max_queue, pool, config.prefetch)
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
            previous = _supersede(job, supersede_key(req, request.client.host if request.client else None))
            if previous is not None and previous.req.fim is not None and req.fim is not None and req.cfg.prediction is None:
                # the user typed on: draft the rest of what the previous request wrote (server/fim_hint.py)
                req.cfg.prediction = previous_answer_hint(previous.req.fim, previous.answer, req.fim)
            try:
                worker.submit(job)
                metrics.submitted(job.id)
            except QueueFull as e:
                raise ApiError(429, f"the server is busy: {worker.max_queue} requests are already waiting; "
                               "retry later", type="rate_limit_error", code="queue_full",
                               headers={"Retry-After": str(e.retry_after)}) from None
            except ShuttingDown:
                raise shutting_down() from None
            shapes = (InfillShapes if req.kind == "infill" else Shapes)(req, config.model_id, config.draft)
            try:
                first = await next_item(job, request)
                if first[0] != "start":
                    metrics.record(job.id, first)
                    return failed(first, req, dialect)
                if req.stream:
                    return JobStream(sse(job, shapes, metrics, out), on_close=lambda: _abandon(job))
                return await collect(job, request, shapes, metrics, dialect, out)
            except BaseException:
                _abandon(job)
                raise
        except ApiError as e:
            return dialect.refuse(e)
        except (ClientGone, ClientDisconnect):  # ClientDisconnect: gone while sending its body
            return Response(status_code=499)

    def _supersede(job: Job, key: str | None) -> Job | None:
        """An editor typed on: the client's previous FIM request stops (within one iteration;
        skipped if still queued) and this one becomes its latest. Returns the previous one."""
        if key is None:
            return None
        old = latest.get(key)
        latest[key] = job
        if old is not None:
            worker.cancel(old)
        for k in [k for k, j in latest.items() if j.finished and k != key]:  # forget finished clients
            del latest[k]
        return old

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
