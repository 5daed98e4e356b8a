"""`GET /metrics`: Prometheus text exposition under the names dashboards already read.

Two sets of names, so a Grafana board built for either server reads this one unchanged:
llama-server's (`llamacpp:prompt_tokens_total`, `llamacpp:tokens_predicted_total`,
`llamacpp:requests_processing`, `llamacpp:requests_deferred`, ... with its meanings: prompt
tokens are the ones evaluated, cached ones excluded) and vLLM's, including its speculative
decoding counters (`vllm:spec_decode_num_drafts_total`, `..._num_draft_tokens_total`,
`..._num_accepted_tokens_total`, `..._num_accepted_tokens_per_pos_total{position}`), which
llama-server does not export. The draft and accepted token counters carry a `proposer`
label (`draft`: the draft model, `ngram`: prompt lookup), so summing over it gives vLLM's
figure. localspec's own series (`localspec:`) count HTTP requests by endpoint and status.

Counts come from each finished request's Done stats (localspec/events.py Stats), read on
the event loop where the handlers take them; a request whose client left before its Done
arrived is settled by a task that waits for that Done, so abandoned streams count too.
Nothing here reaches into the worker beyond the gauges /health already shows.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localspec.events import Done

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what llama-server and prometheus_client send
# vLLM's finished_reason values for localspec's stop reasons
FINISHED = {"eog": "stop", "stop": "stop", "max_tokens": "length", "context_full": "length",
            "interrupted": "abort", "limit": "length"}
PROPOSERS = ("draft", "ngram", "suffix")  # always exported (zeros included); "mtp" once it drafted
ENDPOINTS = {"/chat/completions": "chat", "/completions": "completions", "/models": "models", "/infill": "infill",
             "/health": "health", "/metrics": "metrics", "/messages": "messages",
             "/messages/count_tokens": "count_tokens", "/responses": "responses"}


class Metrics:
    """Counters over the server's life, fed one finished request at a time."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.started = time.time()
        self.prompt_evaluated = 0
        self.prompt_tokens = 0
        self.prompt_seconds = 0.0
        self.predicted = 0
        self.predicted_seconds = 0.0
        self.decodes = 0
        self.tokens_max = 0
        self.drafts = 0
        self.drafted: dict[str, int] = dict.fromkeys(PROPOSERS, 0)
        self.accepted: dict[str, int] = dict.fromkeys(PROPOSERS, 0)
        self.per_position: list[int] = []
        self.finished: dict[str, int] = dict.fromkeys(("stop", "length", "abort"), 0)
        self.failed = 0
        self.http: defaultdict[tuple[str, int], int] = defaultdict(int)
        self._open: set[int] = set()
        self._settling: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ feeding
    def submitted(self, job_id: int) -> None:
        """A job entered the queue: exactly one of its terminal items will be recorded."""
        self._open.add(job_id)

    def record(self, job_id: int, item: tuple) -> None:
        """A job's terminal item: ("done", Done, ...), ("error", exc) or ("cancelled",)."""
        if job_id not in self._open:
            return  # already recorded (a handler and a settle task both saw the end)
        self._open.discard(job_id)
        if item[0] == "done":
            self._add(item[1])
        elif item[0] == "error":
            self.failed += 1
        else:  # cancelled before it started: nothing ran
            self.finished["abort"] += 1

    def settle(self, job_id: int, items: asyncio.Queue) -> None:
        """The handler stopped reading (client gone): wait for the job's end in the background."""
        if job_id not in self._open:
            return

        async def drain() -> None:
            while job_id in self._open:
                item = await items.get()
                if item[0] in ("done", "error", "cancelled"):
                    self.record(job_id, item)

        task = asyncio.get_running_loop().create_task(drain())
        self._settling.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._settling.discard)

    def close(self) -> None:
        """The server stops: jobs still being settled will never end (their loop is going)."""
        for task in list(self._settling):
            task.cancel()

    def _add(self, done: Done) -> None:
        st = done.stats
        self.finished[FINISHED.get(done.reason, "stop")] += 1
        self.prompt_tokens += st.prompt_tokens
        self.prompt_evaluated += st.prompt_evaluated
        self.prompt_seconds += st.prompt_seconds
        self.predicted += st.n_tokens
        self.predicted_seconds += st.seconds
        self.decodes += st.target_calls
        self.tokens_max = max(self.tokens_max, st.prompt_tokens + st.n_tokens)
        self.drafts += len(st.accepted_lengths)
        for p, (d, a) in st.by_proposer().items():  # the one per-proposer split (Stats)
            self.drafted[p] = self.drafted.get(p, 0) + d
            self.accepted[p] = self.accepted.get(p, 0) + a
        if len(self.per_position) < len(st.position_accepts):
            self.per_position += [0] * (len(st.position_accepts) - len(self.per_position))
        for i, n in enumerate(st.position_accepts):
            self.per_position[i] += n

    def count_status(self, path: str, status: int) -> None:
        """One HTTP response (its status as sent; a stream that fails later stays a 200)."""
        self.http[(_endpoint(path), status)] += 1

    # ------------------------------------------------------------------ rendering
    def render(self, running: int, waiting: int, queue_max: int) -> str:
        """The exposition text; the gauges are the worker's, read by the caller."""
        model = {"model_name": self.model_id}
        out: list[str] = []
        lc = "llamacpp:"
        counter(out, lc + "prompt_tokens_total", "Number of prompt tokens processed.", self.prompt_evaluated)
        counter(out, lc + "prompt_seconds_total", "Prompt process time", self.prompt_seconds)
        counter(out, lc + "tokens_predicted_total", "Number of generation tokens processed.", self.predicted)
        counter(out, lc + "tokens_predicted_seconds_total", "Predict process time", self.predicted_seconds)
        counter(out, lc + "n_decode_total", "Total number of llama_decode() calls", self.decodes)
        counter(out, lc + "n_tokens_max", "Largest observed n_tokens.", self.tokens_max)
        counter(out, lc + "n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
                1 if self.decodes else 0)  # one slot: every decode is that slot's
        gauge(out, lc + "prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
              _rate(self.prompt_evaluated, self.prompt_seconds))
        gauge(out, lc + "predicted_tokens_seconds", "Average generation throughput in tokens/s.",
              _rate(self.predicted, self.predicted_seconds))
        gauge(out, lc + "requests_processing", "Number of requests processing.", running)
        gauge(out, lc + "requests_deferred", "Number of requests deferred.", waiting)

        v = "vllm:"
        gauge(out, v + "num_requests_running", "Number of requests in model execution batches.", running, model)
        gauge(out, v + "num_requests_waiting", "Number of requests waiting to be processed.", waiting, model)
        counter(out, v + "prompt_tokens_total", "Number of prefill tokens processed (cached ones included).",
                self.prompt_tokens, model)
        counter(out, v + "generation_tokens_total", "Number of generation tokens processed.", self.predicted, model)
        series(out, v + "request_success_total", "counter", "Count of successfully processed requests.",
               ((dict(model, finished_reason=r), n) for r, n in self.finished.items()))
        counter(out, v + "spec_decode_num_drafts_total", "Number of spec decoding drafts (verifications).",
                self.drafts, model)
        series(out, v + "spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens, by proposer.",
               ((dict(model, proposer=p), n) for p, n in self.drafted.items()))
        series(out, v + "spec_decode_num_accepted_tokens_total", "counter",
               "Number of accepted draft tokens, by proposer.",
               ((dict(model, proposer=p), n) for p, n in self.accepted.items()))
        series(out, v + "spec_decode_num_accepted_tokens_per_pos_total", "counter",
               "Accepted draft tokens per draft position.",
               ((dict(model, position=str(i)), n) for i, n in enumerate(self.per_position)))

        ls = "localspec:"
        series(out, ls + "http_requests_total", "counter", "HTTP responses by endpoint and status code.",
               ((dict(endpoint=e, code=str(c)), n) for (e, c), n in sorted(self.http.items())))
        counter(out, ls + "requests_failed_total", "Generations that ended in an engine error.", self.failed)
        gauge(out, ls + "queue_capacity", "Requests that may wait behind the running ones.", queue_max)
        gauge(out, ls + "start_time_seconds", "When the server started (Unix time).", self.started)
        return "\n".join(out) + "\n"


class CountStatuses:
    """ASGI middleware counting each response's status (the outermost layer, so the Host
    and Origin refusals count too; unhandled 500s are counted by the app's handler)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.count_status(scope["path"], message["status"])
            await send(message)

        await self.app(scope, receive, counting)


# ---------------------------------------------------------------------------- the format
def counter(out: list[str], name: str, help: str, value: float, labels: dict[str, str] | None = None) -> None:
    series(out, name, "counter", help, [(labels or {}, value)])


def gauge(out: list[str], name: str, help: str, value: float, labels: dict[str, str] | None = None) -> None:
    series(out, name, "gauge", help, [(labels or {}, value)])


def series(out: list[str], name: str, kind: str, help: str,
           samples: Iterable[tuple[dict[str, str], float]]) -> None:
    """One metric family: HELP, TYPE, then a line per label set."""
    out.append(f"# HELP {name} {help}")
    out.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
        out.append(f"{name}{{{text}}} {_number(value)}" if text else f"{name} {_number(value)}")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def _endpoint(path: str) -> str:
    """A bounded label for a request path (404 paths are 'other', not one series each)."""
    return ENDPOINTS.get(path[3:] if path.startswith("/v1/") else path, "other")
