"""`localspec bench serve`: N concurrent streaming clients x M chat requests against servers.

Each server under test is started as its own process on a free port (the same model file,
threads and context for all), driven by N client threads that each send M streaming chat
requests over the shipped chat prompts, then stopped. Per server: requests/s, p50/p95 time
to first token and total latency, and per-request decode tok/s (completion tokens after the
first, over the time after the first). Servers: `localspec` (the flags' method, auto by
default), `localspec-ar` (`--method ar`: the same server without speculation) and
`llama-cpp` (`python -m llama_cpp.server`, skipped when its extra is not installed).

The client is the standard library (http.client), so the numbers include no SDK overhead
and the bench needs nothing the server does not.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib.util import find_spec

from localspec.bench.common import load_prompts, machine_info, write_json

SERVERS = ("localspec", "localspec-ar", "llama-cpp")


@dataclass
class Sample:
    ttft: float
    latency: float
    tokens: int

    @property
    def tok_per_s(self) -> float:
        gen = self.latency - self.ttft
        return (self.tokens - 1) / gen if self.tokens > 1 and gen > 0 else 0.0


@dataclass
class Result:
    server: str
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0
    skipped: str = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(kind: str, a: argparse.Namespace, port: int) -> list[str] | None:
    if kind == "llama-cpp":
        if find_spec("sse_starlette") is None or find_spec("starlette_context") is None:
            return None
        return [sys.executable, "-m", "llama_cpp.server", "--model", a.target, "--n_ctx", str(a.ctx),
                "--n_threads", str(a.threads), "--host", "127.0.0.1", "--port", str(port)]
    cmd = [sys.executable, "-m", "localspec.cli", "serve", "-m", a.target, "--port", str(port), "-c", str(a.ctx),
           "-t", str(a.threads), "--queue", str(max(16, a.clients)), "--log-level", "warning", "-n", str(a.n_predict)]
    if kind == "localspec-ar":
        return [*cmd, "--method", "ar"]
    cmd += ["--method", a.method]
    return [*cmd, "-md", a.draft] if a.draft else cmd


def _wait_ready(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v1/models")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"server not ready after {timeout:.0f} s")


def stream_chat(port: int, prompt: str, n_predict: int) -> Sample:
    """One streaming chat request; TTFT is the first non-empty content delta."""
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": prompt}], "stream": True,
                       "max_tokens": n_predict, "temperature": 0, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    ttft = None
    pieces = 0
    tokens = None
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
        if chunk.get("usage"):
            tokens = chunk["usage"].get("completion_tokens")
        for ch in chunk.get("choices") or []:
            if (ch.get("delta") or {}).get("content"):
                pieces += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    latency = time.perf_counter() - t0
    c.close()
    return Sample(ttft if ttft is not None else latency, latency, tokens if tokens is not None else pieces)


def run_load(port: int, prompts: list[str], clients: int, requests: int, n_predict: int, res: Result) -> None:
    lock = threading.Lock()

    def client(i: int) -> None:
        for j in range(requests):
            p = prompts[(i * requests + j) % len(prompts)]
            try:
                s = stream_chat(port, p, n_predict)
                with lock:
                    res.samples.append(s)
            except Exception as e:  # a failed request is a result, not a crash of the bench
                with lock:
                    res.errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    res.wall = time.perf_counter() - t0


def bench_one(kind: str, a: argparse.Namespace, prompts: list[str]) -> Result:
    res = Result(kind)
    port = _free_port()
    cmd = _command(kind, a, port)
    if cmd is None:
        res.skipped = "llama_cpp.server's extra is not installed (pip install 'llama-cpp-python[server]')"
        return res
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_ready(port, proc, a.startup_timeout)
        stream_chat(port, prompts[0], 4)  # warm-up (first-request costs are not the server's speed)
        run_load(port, prompts, a.clients, a.requests, a.n_predict, res)
    except RuntimeError as e:
        res.skipped = str(e)
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if res.skipped and err:
            res.skipped += " | " + err.strip().splitlines()[-1]
    return res


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def summary(res: Result) -> dict:
    s = res.samples
    return {
        "server": res.server,
        "requests": len(s),
        "errors": len(res.errors),
        "requests_per_s": len(s) / res.wall if res.wall > 0 else 0.0,
        "ttft_p50_ms": _pct([x.ttft for x in s], 0.5) * 1e3,
        "ttft_p95_ms": _pct([x.ttft for x in s], 0.95) * 1e3,
        "latency_p50_ms": _pct([x.latency for x in s], 0.5) * 1e3,
        "latency_p95_ms": _pct([x.latency for x in s], 0.95) * 1e3,
        "tok_per_s_per_request": sum(x.tok_per_s for x in s) / len(s) if s else 0.0,
        "skipped": res.skipped,
    }


def table(rows: list[dict]) -> str:
    head = f"{'server':14} {'req':>4} {'err':>4} {'req/s':>6} {'TTFT p50':>9} {'p95':>7} {'lat p50':>8} {'p95':>7} {'tok/s/req':>9}"
    lines = [head]
    for r in rows:
        if r["skipped"]:
            lines.append(f"{r['server']:14} skipped: {r['skipped']}")
            continue
        lines.append(f"{r['server']:14} {r['requests']:>4} {r['errors']:>4} {r['requests_per_s']:>6.2f} "
                     f"{r['ttft_p50_ms']:>7.0f}ms {r['ttft_p95_ms']:>5.0f}ms {r['latency_p50_ms']:>6.0f}ms "
                     f"{r['latency_p95_ms']:>5.0f}ms {r['tok_per_s_per_request']:>9.1f}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="localspec bench serve", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-m", "--target", required=True, help="target model (registry name or .gguf path)")
    p.add_argument("-md", "--draft", default=None, help="draft model for the localspec server")
    p.add_argument("--method", default="auto", help="method of the `localspec` server")
    p.add_argument("--clients", "-N", type=int, default=4, help="concurrent clients")
    p.add_argument("--requests", "-M", type=int, default=3, help="chat requests per client")
    p.add_argument("-n", "--n-predict", type=int, default=64, help="max_tokens of each request")
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1, help="threads of every server")
    p.add_argument("-c", "--ctx", type=int, default=4096, help="context of every server")
    p.add_argument("--servers", default=",".join(SERVERS), help=f"comma-separated subset of {', '.join(SERVERS)}")
    p.add_argument("--prompts", default=None, help="JSONL of {id, kind, prompt} (default: the shipped set)")
    p.add_argument("--startup-timeout", type=float, default=600, help="seconds a server may take to load")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    from localspec.errors import ConfigError
    from localspec.models import resolve_model

    kinds = [k.strip() for k in a.servers.split(",") if k.strip()]
    bad = [k for k in kinds if k not in SERVERS]
    if bad or a.clients < 1 or a.requests < 1 or a.n_predict < 1:
        raise ConfigError(f"--servers must be from {', '.join(SERVERS)}; --clients/--requests/-n >= 1")
    a.target = str(resolve_model(a.target, fetch=True, progress=True))  # one file for every server
    if a.draft:
        a.draft = str(resolve_model(a.draft, fetch=True, progress=True))
    prompts = [p.text for p in load_prompts(a.prompts)]
    rows = []
    for kind in kinds:
        print(f"bench serve: {kind} ({a.clients} clients x {a.requests} requests, -n {a.n_predict})", file=sys.stderr)
        rows.append(summary(bench_one(kind, a, prompts)))
    print(table(rows))
    if a.json:
        write_json(a.json, {"machine": machine_info(a.threads), "args": vars(a), "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
