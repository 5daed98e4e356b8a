"""The client side of `localspec bench serve`: streaming requests, deliberate disconnects,
the tally that proves nothing was lost, and the server's resident memory.

Standard library only (http.client): the numbers carry no SDK overhead, and the bench
needs nothing the servers under test do not.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Sample:
    """One request as the client saw it. A dropped request (the client hung up on purpose)
    keeps what it received but is left out of the latency and speed statistics."""

    ttft: float
    latency: float
    tokens: int
    dropped: bool = False
    drafted: int = 0  # llama-server's `timings` (localspec's too): draft_n, draft_n_accepted
    accepted: int = 0

    @property
    def tok_per_s(self) -> float:
        gen = self.latency - self.ttft
        return (self.tokens - 1) / gen if self.tokens > 1 and gen > 0 else 0.0


@dataclass
class Result:
    """Everything one server's run produced; `errors` holds one message per failed request."""

    server: str
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0
    skipped: str = ""
    slots: int = 1
    note: str = ""
    lone_ttft: float = 0.0
    rss_before_kib: int = 0
    rss_after_kib: int = 0
    command: list[str] = field(default_factory=list)

    @property
    def completed(self) -> list[Sample]:
        return [s for s in self.samples if not s.dropped]

    def tally(self) -> dict:
        """Requests sent = completed + dropped on purpose + errors; `lost` is whatever is
        left over, which must be 0 (a request that vanished without an answer or an error).
        Errors are counted by kind ('HTTP 500', 'stream error', an exception's type), and
        `server_errors` is every 5xx: the issue's "no 500" is `server_errors == 0`."""
        by_kind = Counter(error_kind(e) for e in self.errors)
        done = len(self.completed)
        dropped = len(self.samples) - done
        sent = len(self.samples) + len(self.errors)
        return {
            "sent": sent,
            "completed": done,
            "dropped": dropped,
            "errors": dict(sorted(by_kind.items())),
            "server_errors": sum(n for k, n in by_kind.items() if k.startswith("HTTP 5")),
            "lost": sent - done - dropped - len(self.errors),
        }

    def aggregate_tok_per_s(self) -> float:
        """All completion tokens of completed requests over the wall time of the whole run:
        the throughput a server with several slots is built for (per-request tok/s would
        show a slot server as slower, since its slots share the cores)."""
        return sum(s.tokens for s in self.completed) / self.wall if self.wall > 0 else 0.0


class StreamError(RuntimeError):
    """The server answered 200 but put an error object into the stream."""


class HTTPStatusError(RuntimeError):
    """The server answered with a status other than 200 (the message starts 'HTTP <code>')."""


def error_kind(message: str) -> str:
    """'HTTP 500: ...' -> 'HTTP 500'; 'ConnectionResetError: ...' -> 'ConnectionResetError'."""
    return message.split(":", 1)[0].strip()


def _hang_up(sock: socket.socket | None, response: http.client.HTTPResponse, conn: http.client.HTTPConnection) -> None:
    """Drop the connection the way a killed client does: SO_LINGER 0 makes close() send a
    reset instead of a polite FIN, so the server learns at its next write at the latest."""
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    response.close()
    conn.close()
    if sock is not None:
        sock.close()


def stream_chat(port: int, prompt: str, n_predict: int, *, drop_after: int | None = None,
                timeout: float = 600) -> Sample:
    """One streaming chat request; TTFT is the first non-empty content delta.

    With `drop_after`, the client hangs up after that many content deltas (an answer that
    ends sooner completes normally). Raises HTTPStatusError / StreamError / OSError.
    """
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": prompt}], "stream": True,
                       "max_tokens": n_predict, "temperature": 0, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    sock = c.sock  # held before getresponse(), which may drop the connection's reference
    r = c.getresponse()
    if r.status != 200:
        raise HTTPStatusError(f"HTTP {r.status}: {r.read()[:200]!r}")
    ttft = None
    pieces = 0
    tokens = None
    timings: dict = {}
    while True:
        line = r.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("error"):
            raise StreamError(f"stream error: {str(chunk['error'])[:200]}")
        if chunk.get("usage"):
            tokens = chunk["usage"].get("completion_tokens")
        timings = chunk.get("timings") or timings
        for ch in chunk.get("choices") or []:
            if (ch.get("delta") or {}).get("content"):
                pieces += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
        if drop_after is not None and pieces >= drop_after:
            _hang_up(sock, r, c)
            latency = time.perf_counter() - t0
            return Sample(ttft if ttft is not None else latency, latency, pieces, dropped=True)
    latency = time.perf_counter() - t0
    c.close()
    return Sample(ttft if ttft is not None else latency, latency, tokens if tokens is not None else pieces,
                  drafted=int(timings.get("draft_n", 0)), accepted=int(timings.get("draft_n_accepted", 0)))


def drop_plan(seed: int, client: int, requests: int, p: float, n_predict: int) -> list[int | None]:
    """Per request of one client: None (read to the end) or the delta after which to hang up.

    Seeded per client, so a rerun drops the same requests at the same points whatever the
    thread interleaving; the point is uniform over the first half of the answer, so the
    server is always mid-generation when the client leaves.
    """
    rng = random.Random(f"{seed}:{client}")
    plan: list[int | None] = []
    for _ in range(requests):
        drop = rng.random() < p
        point = rng.randint(1, max(1, n_predict // 2))
        plan.append(point if drop else None)
    return plan


def run_load(port: int, prompts: list[str], clients: int, requests: int, n_predict: int, res: Result, *,
             disconnects: float = 0.0, seed: int = 0) -> None:
    """N client threads x M requests; fills res.samples / res.errors and res.wall.

    Each prompt starts with a tag unique to the request ('[3-7] ...'): both servers reuse
    a cached prompt prefix, and N x M requests cycle over a few prompts, so without it a
    repeated prompt would be answered from cache and TTFT would measure the cache.
    """
    lock = threading.Lock()

    def client(i: int) -> None:
        plan = drop_plan(seed, i, requests, disconnects, n_predict)
        for j in range(requests):
            p = f"[{i}-{j}] {prompts[(i * requests + j) % len(prompts)]}"
            try:
                s = stream_chat(port, p, n_predict, drop_after=plan[j])
                with lock:
                    res.samples.append(s)
            except Exception as e:  # a failed request is a result, not a crash of the bench
                with lock:
                    res.errors.append(str(e) if isinstance(e, (HTTPStatusError, StreamError))
                                      else f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    res.wall = time.perf_counter() - t0


# --------------------------------------------------------------------------- memory


def read_rss_kib(pid: int, proc: Path = Path("/proc")) -> int:
    """VmRSS of one process in KiB (0 when it is gone or the line is missing: a kernel
    thread, or a system without /proc)."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def tree_rss_kib(pid: int, proc: Path = Path("/proc")) -> int:
    """RSS of a process and all its descendants: a server that hands work to child
    processes must not look flat because its memory grows elsewhere."""
    children: dict[int, list[int]] = {}
    for d in proc.glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
            # the command name in parentheses may hold spaces: fields restart after the last ')'
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += read_rss_kib(p, proc)
        todo.extend(children.get(p, []))
    return total
