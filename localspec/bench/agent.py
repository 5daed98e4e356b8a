"""`localspec bench agent`: replay a coding agent's tool-calling sessions against servers.

The traffic is bench/prompts/agent.jsonl (scripts/make_agent_traces.py: sessions built from
HumanEval 0-99, each read a file -> write it back fixed -> run the tests -> answer). Every
assistant message of a session is one request: the recorded history before it, the session's
tools, greedy, streamed. So each server answers exactly the same requests, whatever it wrote
the turn before.

Per server: aggregate tok/s (completion tokens over the run's wall time), median time to the
first delta, and tool-call validity: every call the server returned must name a declared tool
and carry arguments that parse as JSON and validate against that tool's schema (a step that
expects a call and gets plain text counts as "no call"). The expected tool and its exact
arguments are reported beside it (how often the model did what the ideal trace did).

Servers: `localspec` (auto), `localspec-ar`, and `llama-server --jinja` from the same llama.cpp
sources with each `--spec-type` asked for (`llama-server:draft-simple`, `llama-server:ngram-mod`,
`llama-server:none`, ...). Ratios are to localspec-ar and to the fastest llama-server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from localspec.bench.agent_client import Step, StepResult, check_calls, stream_step
from localspec.bench.common import machine_info, write_json
from localspec.bench.peer import SERVER_BIN, peer_tool
from localspec.bench.serve import _free_port, _wait_ready, start_server, stop_server
from localspec.bench.serve_peer import llama_server_cmd, localspec_cmd

TRACES = Path(__file__).parent / "prompts" / "agent.jsonl"
DEFAULT_SERVERS = ("localspec", "localspec-ar", "llama-server:none", "llama-server:draft-simple",
                   "llama-server:ngram-mod")


def load_steps(path: Path, half: str, sessions: int) -> list[Step]:
    """The first `sessions` sessions of `half` ('tune', 'report', 'all'), cut into steps."""
    out: list[Step] = []
    chosen = 0
    for line in path.read_text().splitlines():
        s = json.loads(line)
        if half != "all" and s["half"] != half:
            continue
        if chosen == sessions:
            break
        chosen += 1
        msgs = s["messages"]
        for i, m in enumerate(msgs):
            if m["role"] == "assistant":
                out.append(Step(s["id"], i, msgs[:i], s["tools"], m))
    return out


@dataclass
class Run:
    server: str
    command: list[str] = field(default_factory=list)
    results: list[StepResult] = field(default_factory=list)
    wall: float = 0.0
    skipped: str = ""

    def summary(self) -> dict:
        ok = [r for r in self.results if not r.error]
        calls = [c for r in ok for c in r.calls]
        expect_call = [r for r in ok if r.step.expected_tool]
        tokens = sum(r.tokens for r in ok)
        return {
            "server": self.server, "skipped": self.skipped or None, "requests": len(self.results),
            "errors": [r.error for r in self.results if r.error][:5],
            "tok_per_s": round(tokens / self.wall, 2) if self.wall else 0.0, "tokens": tokens,
            "wall_s": round(self.wall, 1),
            "ttft_p50_s": round(statistics.median(r.ttft for r in ok), 3) if ok else None,
            "calls": len(calls), "calls_valid": sum(c.valid for c in calls),
            "steps_expecting_call": len(expect_call),
            "steps_with_expected_tool": sum(r.called(r.step.expected_tool) for r in expect_call),
            "steps_exact_arguments": sum(r.exact for r in expect_call),
            "steps_no_call": sum(not r.calls for r in expect_call),
            "command": " ".join(self.command),
            "steps": [{"session": r.step.session, "index": r.step.index, "expected": r.step.expected_tool,
                       "calls": [{"name": c.name, "valid": c.valid, "why": c.why, "arguments": c.arguments[:200]}
                                 for c in r.calls],
                       "content": r.content[:200], "finish": r.finish, "tokens": r.tokens,
                       "ttft_s": round(r.ttft, 3), "latency_s": round(r.latency, 3), "error": r.error}
                      for r in self.results],
        }


def wait_timing(port: int, timeout: float) -> None:
    """Until `/health` says the cost model's background timing is done (localspec.timing null)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            info = json.loads(c.getresponse().read()).get("localspec") or {}
            if info.get("timing") is None:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the cost model's timing was not done after {timeout:.0f} s")


def _server_cmd(kind: str, a: argparse.Namespace, port: int) -> tuple[list[str] | None, str]:
    if kind.startswith("llama-server"):
        binary = peer_tool(SERVER_BIN)
        if binary is None:
            return None, f"{SERVER_BIN} not built: run scripts/build_llama_cpp_peer.sh"
        spec = kind.partition(":")[2] or "draft-simple"
        ns = argparse.Namespace(**{**vars(a), "draft": a.draft if "draft" in spec else None})
        cmd = llama_server_cmd(str(binary), ns, port) + ["--jinja", "-n", str(a.n_predict)]
        if spec != "draft-simple" and spec != "none":
            cmd += ["--spec-type", spec]
        return cmd, ""
    if kind not in ("localspec", "localspec-ar"):
        return None, f"unknown server {kind!r}"
    cmd, _ = localspec_cmd(kind, a, port, "-np" if a.np > 1 else None)
    return cmd, ""


def run_server(kind: str, a: argparse.Namespace, steps: list[Step]) -> Run:
    run = Run(kind)
    port = _free_port()
    cmd, why = _server_cmd(kind, a, port)
    if cmd is None:
        run.skipped = why
        return run
    run.command = cmd
    proc, log = start_server(cmd)
    try:
        _wait_ready(port, proc, a.ready_timeout)
        # one warm-up request (loads, first allocation) outside the timing; then localspec's
        # background cost timing must be over, or it would share the cores with the run
        stream_step(port, steps[0], a.n_predict)
        if kind.startswith("localspec"):
            wait_timing(port, a.ready_timeout)
        queue = list(steps)
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    step = queue.pop(0)
                r = stream_step(port, step, a.n_predict)
                with lock:
                    run.results.append(r)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(a.np)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        run.wall = time.perf_counter() - t0
    except (RuntimeError, OSError) as e:
        run.skipped = str(e)
    finally:
        stop_server(proc, log, run)  # a skipped run gets the server's last stderr line
    for r in run.results:
        check_calls(r)
    return run


def table(rows: list[dict]) -> str:
    base = next((r["tok_per_s"] for r in rows if r["server"] == "localspec-ar" and r["tok_per_s"]), 0.0)
    peers = [r["tok_per_s"] for r in rows if r["server"].startswith("llama-server") and r["tok_per_s"]]
    best_peer = max(peers, default=0.0)
    out = ["| server | tok/s | x AR | x llama-server best | TTFT p50 s | calls valid | expected tool | exact args | errors |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["skipped"]:
            out.append(f"| {r['server']} | skipped: {r['skipped']} |||||||| ")
            continue
        ar = f"{r['tok_per_s'] / base:.2f}" if base else "-"
        pe = f"{r['tok_per_s'] / best_peer:.2f}" if best_peer else "-"
        out.append(f"| {r['server']} | {r['tok_per_s']:.1f} | {ar} | {pe} | {r['ttft_p50_s']} | "
                   f"{r['calls_valid']}/{r['calls']} | {r['steps_with_expected_tool']}/{r['steps_expecting_call']} | "
                   f"{r['steps_exact_arguments']}/{r['steps_expecting_call']} | {len(r['errors'])} |")
    return "\n".join(out)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", dest="target", required=True, help="target model (registry name or .gguf path)")
    p.add_argument("-md", "--model-draft", dest="draft", default=None, help="draft model (registry name or .gguf path)")
    p.add_argument("--servers", nargs="+", default=list(DEFAULT_SERVERS),
                   help="localspec, localspec-ar, llama-server:SPEC (SPEC: none, draft-simple, ngram-mod, "
                   "ngram-simple, ngram-map-k, ...)")
    p.add_argument("--half", choices=("tune", "report", "all"), default="report")
    p.add_argument("--sessions", type=int, default=6, help="sessions of the half to replay (4 requests each)")
    p.add_argument("-n", "--n-predict", type=int, default=384, help="max tokens per request")
    p.add_argument("-np", "--np", type=int, default=1, help="concurrent clients (and server slots)")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=4096, help="context per slot")
    p.add_argument("--method", default="auto", help="localspec's method")
    p.add_argument("--peer-draft-max", type=int, default=16)
    p.add_argument("--peer-draft-min", type=int, default=0)
    p.add_argument("--peer-p-min", type=float, default=0.75)
    p.add_argument("--peer-args", default="--poll 0")
    p.add_argument("--ready-timeout", type=float, default=600)
    p.add_argument("--traces", type=Path, default=TRACES)
    p.add_argument("--out", type=Path, default=None, help="JSON results")


def main(a: argparse.Namespace) -> int:
    from localspec.errors import ConfigError
    from localspec.models import resolve_model

    if a.np < 1 or a.sessions < 1 or a.n_predict < 1:
        raise ConfigError("bench agent: -np, --sessions and -n must be >= 1")
    a.target = str(resolve_model(a.target, fetch=True, progress=True))  # one file for every server
    if a.draft:
        a.draft = str(resolve_model(a.draft, fetch=True, progress=True))
    a.clients = a.np
    steps = load_steps(a.traces, a.half, a.sessions)
    if not steps:
        print(f"bench agent: no sessions in {a.traces} for half {a.half!r}", file=sys.stderr)
        return 2
    print(f"bench agent: {len(steps)} requests ({a.sessions} sessions, {a.half} half), -np {a.np}", file=sys.stderr)
    rows = []
    for kind in a.servers:
        print(f"  {kind} ...", file=sys.stderr, flush=True)
        rows.append(run_server(kind, a, steps).summary())
    print(table(rows))
    if a.out:
        write_json(a.out, {"machine": machine_info(a.threads), "args": {k: str(v) for k, v in vars(a).items()}, "rows": rows})
    return 0
