"""The slot threads that run generations, fed by one bounded FIFO queue of jobs.

A Session is not thread-safe, so each slot is one thread with a session of its own: with
`-np 1` the server's session (requests one at a time, in arrival order, as one llama-server
slot); with `-np N` the N slot sessions of a localspec.pool.Pool, whose decodes are joined
into one llama_decode per round (backend/slots.py). A slot's whole generation runs inside
`pool.active(slot)`, which is what lets the others batch with it. HTTP handlers run on the
event loop; they submit a Job and read its items from an asyncio queue that the slot feeds
through `loop.call_soon_threadsafe`. A full queue is refused at once (429), a cancelled job
(client gone, or superseded by a newer FIM request: server/infill.py) is skipped if it has
not started, generates nothing if its client left while its prompt was being prepared
(rendered and tokenized, bounded by the request's size, server/bounds.py; the evaluation
itself stops at the next batch: KVState.sync), and is stopped within one decoding iteration
if it is generating (`Session.stop` on its slot's session). After a FIM answer an idle
server evaluates the client's likely next prompt (`_prefetch`, server/fim_prefetch.py) until
a request arrives that is not the one guessed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import queue
import threading
import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from localspec.errors import LocalspecError
from localspec.events import Accepted, Done, PromptLogprobs, Written
from localspec.server.fim_prefetch import next_request
from localspec.server.schema import GenRequest
from localspec.server.thinking import splits, start
from localspec.session import Session
from localspec.stopflag import StopFlag

log = logging.getLogger("localspec.server")

_ids = itertools.count(1)
SIMILAR = 0.5  # a request reuses a slot's cache when it shares this much of its prompt (llama-server's default)


class QueueFull(Exception):
    """The bounded queue has no room: answer 429 with Retry-After."""

    def __init__(self, retry_after: int) -> None:
        super().__init__("queue full")
        self.retry_after = retry_after


class ShuttingDown(Exception):
    """The server is stopping and takes no new work (503)."""


@dataclass
class Job:
    """One request on its way through the worker.

    Items put on `items` (in order): ("start",) once the prompt is evaluated, then
    ("text", text, kind, n_tokens[, segment, proposer]) pieces, then ("done", Done); or a single
    ("error", exception) when generation could not start or failed. When asked, the
    log-probabilities come too: ("prompt_logprobs", entries) first, ("logprobs", entries)
    just before the text of the tokens they score.
    """

    req: GenRequest
    loop: asyncio.AbstractEventLoop
    items: asyncio.Queue = field(default_factory=asyncio.Queue)
    id: int = field(default_factory=lambda: next(_ids))
    cancelled: threading.Event = field(default_factory=threading.Event)
    enqueued: float = field(default_factory=time.perf_counter)
    started: float | None = None
    finished: bool = False
    answer: str = ""  # a FIM request's text sent so far (the client's next request drafts from it: server/fim_hint.py)

    @property
    def queue_seconds(self) -> float:
        return (self.started or time.perf_counter()) - self.enqueued

    def send(self, item: tuple) -> None:
        """Hand an item to the request's handler (called from the worker thread)."""
        if item[0] == "text" and self.req.fim is not None:  # only a FIM client's next request reads it
            self.answer += item[1]
        try:
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server stopped): nobody is listening
            self.cancelled.set()


@dataclass(frozen=True)
class Served:
    """What the worker did with a job (kept for /health and tests)."""

    job_id: int
    reason: str  # a Done reason, "skipped" (cancelled before it started) or "error"
    n_tokens: int
    cancelled: bool


class Worker:
    """Owns the sessions; each slot runs one job at a time on its own thread."""

    def __init__(self, session: Session, max_queue: int = 16, pool: Any = None, prefetch: bool = True) -> None:
        self.session = session  # -np 1: the one slot; with a pool, its base (renders, metadata)
        self.pool = pool  # a localspec.pool.Pool, or None
        self.sessions: list[Session] = list(pool.slots) if pool is not None else [session]
        self.max_queue = max_queue
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=max(1, max_queue))
        self._lock = threading.Lock()
        self._current: list[Job | None] = [None] * len(self.sessions)
        self._closing = False
        self._threads: list[threading.Thread] = []
        self._avg_seconds = 2.0  # running mean of service time, for Retry-After
        self.served: deque[Served] = deque(maxlen=256)
        # several slots: a dispatcher hands each job to the idle slot whose last request
        # shares the longest prefix with it (its KV cache then holds most of the prompt,
        # llama-server's slot similarity); one slot reads the queue itself
        many = len(self.sessions) > 1
        self._inbox: list[queue.Queue[Job | None]] | None = [queue.Queue() for _ in self.sessions] if many else None
        self._idle = threading.Condition()
        self._free: set[int] = set(range(len(self.sessions)))
        self._keys: list[str] = [""] * len(self.sessions)
        self._used: list[int] = [0] * len(self.sessions)  # when each slot last took a job (LRU)
        self._tick = 0
        # an idle slot evaluates the prompt its FIM client will likely send next, until any
        # job arrives (server/fim_prefetch.py); each running prefetch's stop flag, by slot
        self.prefetch = prefetch
        self._prefetching: dict[int, tuple[StopFlag, tuple]] = {}  # slot: (its stop, the request it guessed)
        self.prefetched = [0] * len(self.sessions)  # tokens evaluated ahead of their request, by slot (/slots)

    # ------------------------------------------------------------------ event-loop side
    def start(self) -> None:
        if not self._threads:
            for i in range(len(self.sessions)):
                t = threading.Thread(target=self._run, args=(i,), name=f"localspec-slot-{i}", daemon=True)
                t.start()
                self._threads.append(t)
            if self._inbox is not None:
                t = threading.Thread(target=self._dispatch, name="localspec-dispatch", daemon=True)
                t.start()
                self._threads.append(t)

    def submit(self, job: Job) -> None:
        """Queue a job, or raise QueueFull / ShuttingDown at once."""
        if self._closing:
            raise ShuttingDown()
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise QueueFull(self.retry_after()) from None
        if self._inbox is None:  # one slot: a request outranks its guess, unless it is that request
            self._stop_prefetch(0, job)

    def cancel(self, job: Job) -> None:
        """The client went away: skip the job, or stop it within one iteration (thread-safe)."""
        job.cancelled.set()
        with self._lock:
            for i, cur in enumerate(self._current):
                if cur is job:
                    self.sessions[i].stop()

    def retry_after(self) -> int:
        """Seconds until a queue slot is likely free (whole seconds, as the header wants)."""
        per_slot = self._jobs.qsize() / max(1, self.max_queue * len(self.sessions))
        return max(1, min(120, math.ceil(self._avg_seconds * (per_slot + 1))))

    @property
    def queued(self) -> int:
        return self._jobs.qsize()

    @property
    def busy(self) -> bool:
        return any(c is not None for c in self._current)

    @property
    def alive(self) -> bool:
        """Whether a slot thread still runs (then the sessions must not be closed under it)."""
        return any(t.is_alive() for t in self._threads)

    def slots(self) -> list[dict]:
        """What each slot does now (/slots, /health)."""
        out = []
        for i, job in enumerate(self._current):
            out.append({"id": i, "is_processing": job is not None, "job": job.id if job else None,
                        "kind": job.req.kind if job else None, "prefetching": i in self._prefetching, "n_prefetched": self.prefetched[i]})
        return out

    def drain(self, timeout: float) -> None:
        """Refuse new jobs; give queued and running ones `timeout` seconds, then stop them.

        A stopped generation still ends with its Done event, so a stream that is cut off
        gets its last chunk and `[DONE]` instead of a dropped connection.
        """
        self._closing = True
        deadline = time.monotonic() + timeout
        while (self.busy or self.queued) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._abort()

    def close(self, timeout: float = 10.0) -> None:
        """Refuse new jobs, drop queued ones, stop the running ones, and end the threads."""
        self._abort()
        for _ in self._threads if self._inbox is None else (0,):  # the dispatcher tells the slots
            try:
                self._jobs.put(None, timeout=timeout)
            except queue.Full:  # pragma: no cover - emptied by _abort
                pass
        for t in self._threads:
            t.join(timeout)

    def _abort(self) -> None:
        self._closing = True
        with self._lock:
            for flag, _ in self._prefetching.values():
                flag.set()
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.send(("error", ShuttingDown()))
        with self._lock:
            for i, cur in enumerate(self._current):
                if cur is not None:
                    self.sessions[i].stop()

    # ------------------------------------------------------------------ slot threads
    def _dispatch(self) -> None:
        """Wait for an idle slot, take the next job, give it to the idle slot that served
        the most similar request (a job stays in the bounded queue until a slot is free)."""
        assert self._inbox is not None
        while True:
            with self._idle:
                self._idle.wait_for(lambda: bool(self._free))
            job = self._jobs.get()
            if job is None:
                for box in self._inbox:
                    box.put(None)
                return
            key = _key(job.req)
            with self._idle:
                free = sorted(self._free)
                slot = max(free, key=lambda i: _common(self._keys[i], key))
                if _common(self._keys[slot], key) < SIMILAR * len(key):  # a new conversation:
                    slot = min(free, key=lambda i: self._used[i])  # the least recently used slot
                self._free.discard(slot)
                self._keys[slot] = key
                self._tick += 1
                self._used[slot] = self._tick
            self._inbox[slot].put(job)
            self._stop_prefetch(slot, job)  # a slot that guesses is idle: another request stops the guess

    def _run(self, slot: int) -> None:
        while True:
            job = self._jobs.get() if self._inbox is None else self._inbox[slot].get()
            if job is None:
                return
            try:
                self._one(slot, job)
            finally:
                with self._idle:
                    self._free.add(slot)
                    self._idle.notify_all()
            self._prefetch(slot, job)  # free meanwhile: the next job it is given stops it

    def _one(self, slot: int, job: Job) -> None:
        """Serve one job on `slot` (a cancelled one that never started is skipped)."""
        if job.cancelled.is_set():
            self.served.append(Served(job.id, "skipped", 0, True))
            job.send(("error", ShuttingDown()) if self._closing else ("cancelled",))
            return
        with self._lock:
            self._current[slot] = job
            for flag, _ in self._prefetching.values():  # guesses use an idle server only
                flag.set()
        t0 = time.perf_counter()
        job.started = t0
        try:
            with self.pool.active(slot) if self.pool is not None else nullcontext():
                self._serve(job, self.sessions[slot])
        finally:
            with self._lock:
                self._current[slot] = None
            job.finished = True
            self._avg_seconds = 0.8 * self._avg_seconds + 0.2 * (time.perf_counter() - t0)

    def _prefetch(self, slot: int, job: Job) -> None:
        """After a FIM answer, while no job waits: evaluate the prompt of the client's likely
        next request on this slot (server/fim_prefetch.py); any submitted job stops it."""
        req = job.req
        if not self.prefetch or req.fim is None or job.cancelled.is_set() or not job.answer or self._closing:
            return
        guess = next_request(req.fim, job.answer)
        if guess is None:
            return
        session = self.sessions[slot]
        flag = StopFlag()
        with self._lock:  # (the dispatcher or submit() stop it under this lock once a job is handed over)
            if self._closing or self.busy or not (self._jobs.empty() if self._inbox is None else self._inbox[slot].empty()):
                return
            self._prefetching[slot] = (flag, (guess, req.cfg.n_predict))
        try:
            tokens = session.fim_prompt(guess, req.cfg.n_predict)
            with self.pool.active(slot) if self.pool is not None else nullcontext():
                self.prefetched[slot] += session.prefetch(tokens, flag)
        except LocalspecError as e:  # (a guess past the context): the next request evaluates its own
            log.info("no prefetch: %s", e)
        except Exception:  # a guess is never worth a failed slot: the next request re-evaluates
            log.exception("prefetch failed")
        finally:
            with self._lock:
                del self._prefetching[slot]

    def _stop_prefetch(self, slot: int, job: Job) -> None:
        """Stop `slot`'s guess at once, unless `job` is the request it guessed: then the
        evaluation goes on (it is the job's own prompt, in the largest batches) and the job
        finds it done."""
        with self._lock:
            flag, guessed = self._prefetching.get(slot, (None, None))
            if flag is not None and guessed != (job.req.fim, job.req.cfg.n_predict):
                flag.set()

    def _serve(self, job: Job, session: Session) -> None:
        req = job.req
        try:
            events = start(session, req)  # chat on a thinking model: split + budget
        except LocalspecError as e:
            self.served.append(Served(job.id, "error", 0, job.cancelled.is_set()))
            job.send(("error", e))
            return
        except Exception as e:  # an engine failure: report it, keep serving
            log.exception("generation failed to start")
            self.served.append(Served(job.id, "error", 0, job.cancelled.is_set()))
            job.send(("error", e))
            return
        if job.cancelled.is_set():  # the client left while its prompt was rendered, tokenized, evaluated:
            session.stop()  # no token is generated (the loop ends at its first check)
        job.send(("start",))
        done: Done | None = None
        split = req.kind == "chat" and splits(session, req.reasoning_format)
        try:
            for ev in events:
                if job.cancelled.is_set():
                    session.stop()  # also covers a cancel that raced generate()'s start
                if isinstance(ev, Accepted | Written) and ev.logprobs:  # before their text: a chunk
                    job.send(("logprobs", ev.logprobs))  # carries its tokens' (server/logprobs.py)
                elif isinstance(ev, PromptLogprobs):
                    job.send(("prompt_logprobs", ev.entries))
                if split:  # (segment, text) pieces of a thinking model: reasoning_content apart
                    for p in events.take():
                        job.send(("text", p.text, p.kind, p.tokens, p.segment))
                    if isinstance(ev, Done):
                        done = ev
                elif isinstance(ev, Accepted):
                    if ev.tokens:
                        job.send(("text", ev.text, "draft", len(ev.tokens), None, ev.source))
                elif isinstance(ev, Written):
                    job.send(("text", ev.text, ev.kind, len(ev.tokens)))
                elif isinstance(ev, Done):
                    done = ev
        except Exception as e:
            log.exception("generation failed")
            self.served.append(Served(job.id, "error", 0, job.cancelled.is_set()))
            job.send(("error", e))
            return
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
        if done is None:  # pragma: no cover - every loop ends with Done
            job.send(("error", RuntimeError("generation ended without a Done event")))
            return
        self.served.append(Served(job.id, done.reason, done.stats.n_tokens, job.cancelled.is_set()))
        sp = getattr(events, "splitter", None)
        job.send(("done", done, (sp.reasoning, sp.answer) if split and sp is not None else None))


def _key(req: GenRequest) -> str:
    """What a request's prompt starts with, as text (chat: the messages in order)."""
    p = req.prompt
    if isinstance(p, str):
        return p
    return "\x1e".join(f"{m.get('role')}\x1f{m.get('content')}" if isinstance(m, dict) else str(m) for m in p)


def _common(a: str, b: str) -> int:
    """Length of the common prefix of two strings."""
    n = min(len(a), len(b))
    i = 0
    while i + 256 <= n and a[i : i + 256] == b[i : i + 256]:  # whole blocks first, then characters
        i += 256
    while i < n and a[i] == b[i]:
        i += 1
    return i
