"""`localspec bench fim`: code completion as an editor feels it, beside llama-server /infill.

Every server is started on the same model files and threads and warmed up with one request;
then each hole is asked of every server in turn, one request at a time (so whatever the
machine's load does, it does to all of them alike; the idle servers sleep), greedy, `n_predict` 64, the editor's request shape:
bench/fim_holes.py): latency per completion as the client sees it (p50 / p95), generated
tokens per second of that latency, and how often the answer is exactly the middle the file
has. llama-server runs with each `--spec-type` in the same run (`none`, `ngram-simple`,
`ngram-map-k`, `draft-simple`) when the peer binaries exist (scripts/build_llama_cpp_peer.sh).

The typing simulation (localspec only: llama-server has no notion of a newer request
superseding an older one, its editors abort the old connection) types a hole's middle one
character per `--interval-ms`, each keystroke a new streamed /infill from the same client;
each superseded stream must end promptly. It reports how long a superseded completion went
on after its successor was sent (stale ms, p50 / max) and the generated tokens of
superseded requests: a stale completion that keeps decoding shows as a large stale time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from localspec.bench.common import machine_info, write_json
from localspec.bench.fim_holes import Hole, cut_holes
from localspec.bench.fim_rhythm import (
    answer_free,
    bound_cells,
    run_rhythm,
    sample,
    table_lines,
    wait_idle,
)
from localspec.bench.peer import peer_tool
from localspec.bench.serve import _free_port, _pct, _wait_ready, start_server, stop_server

PEER_SPEC = ("none", "ngram-simple", "ngram-map-k", "draft-simple")
DEFAULT_SERVERS = "localspec," + ",".join(f"llama-server:{s}" for s in PEER_SPEC)
# the warm-up request: no hole's text, so no measured prompt is in a server's cache before it is asked
WARM_UP = {"input_prefix": "def warm_up(x):\n    ", "input_suffix": "\n", "n_predict": 8, "temperature": 0}


@dataclass
class Row:
    """One server's results."""

    server: str
    command: list[str] = field(default_factory=list)
    skipped: str = ""
    samples: list[dict] = field(default_factory=list)  # per hole: id, kind, latency, tokens, exact
    typing: dict | None = None
    rhythm: dict | None = None

    def summary(self) -> dict:
        s = self.samples
        lat = [x["latency"] for x in s]
        toks = sum(x["tokens"] for x in s)
        out = {"server": self.server, "skipped": self.skipped, "command": shlex.join(self.command),
               "holes": len(s), "latency_p50_ms": _pct(lat, 0.5) * 1e3, "latency_p95_ms": _pct(lat, 0.95) * 1e3,
               "free_p50_ms": _pct(answer_free(s), 0.5) * 1e3,
               "tok_per_s": toks / sum(lat) if lat and sum(lat) > 0 else 0.0,
               "exact": sum(x["exact"] for x in s) / len(s) if s else 0.0,
               "by_kind": {k: sum(x["exact"] for x in s if x["kind"] == k) for k in ("line", "lines", "block")},
               "samples": s}
        if self.typing is not None:
            out["typing"] = self.typing
        if self.rhythm is not None:
            out["rhythm"] = self.rhythm
        return out


def post(port: int, body: dict, timeout: float = 600) -> tuple[dict, float]:
    """One /infill, its JSON and the client's latency (seconds)."""
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/infill", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
    finally:
        c.close()
    if r.status != 200:
        raise RuntimeError(f"/infill answered {r.status}: {data[:200]!r}")
    return json.loads(data), time.perf_counter() - t0


def ask_one(port: int, h: Hole, n_predict: int) -> dict:
    """One hole at the cursor: the record bench fim keeps of it (the rhythm's, nothing typed)."""
    return sample(h, 0, *post(port, h.body(n_predict)))


def stream_until_done(port: int, body: dict, sent: list[float], ended: list[float], tokens: list[int]) -> None:
    """A streamed /infill read to its end; records when it ended and its tokens."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        c.request("POST", "/infill", json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
        sent.append(time.perf_counter())
        r = c.getresponse()
        n = 0
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("data: "):
                chunk = json.loads(line[6:])
                n = chunk.get("tokens_predicted", n)
    finally:
        ended.append(time.perf_counter())
        tokens.append(n)
        c.close()


def typing(port: int, holes: list[Hole], n_predict: int, interval: float, keys: int) -> dict:
    """Type `keys` characters of each hole's middle, one request per keystroke, every `interval`."""
    stale, superseded_tokens, finals = [], [], []
    for h in holes:
        runs: list[tuple[threading.Thread, list, list, list]] = []
        for k in range(min(keys, len(h.middle)) + 1):
            body = {**h.body(n_predict, typed=k), "id_slot": 0}
            sent: list[float] = []
            ended: list[float] = []
            toks: list[int] = []
            t = threading.Thread(target=stream_until_done, args=(port, body, sent, ended, toks), daemon=True)
            t.start()
            runs.append((t, sent, ended, toks))
            time.sleep(interval)
        for t, *_ in runs:
            t.join(600)
        for (_, _, ended, toks), (_, nxt_sent, _, _) in zip(runs, runs[1:], strict=False):
            if ended and nxt_sent:
                stale.append(max(0.0, ended[0] - nxt_sent[0]))
                superseded_tokens.append(toks[0] if toks else 0)
        last = runs[-1]
        if last[1] and last[2]:
            finals.append(last[2][0] - last[1][0])
    return {"holes": len(holes), "keystrokes": len(stale) + len(finals), "interval_ms": interval * 1e3,
            "stale_p50_ms": _pct(stale, 0.5) * 1e3, "stale_max_ms": max(stale, default=0.0) * 1e3,
            "superseded_tokens_mean": sum(superseded_tokens) / len(superseded_tokens) if superseded_tokens else 0.0,
            "final_latency_p50_ms": _pct(finals, 0.5) * 1e3}


def server_cmd(server: str, a: argparse.Namespace, port: int) -> tuple[list[str] | None, str]:
    """(command, why not) for `localspec[:METHOD]` or `llama-server:SPEC_TYPE`."""
    t = str(a.threads)
    server, *flags = server.split("+")  # localspec+no-prefetch: `serve --no-prefetch`
    if server.partition(":")[0].partition("=")[0] == "localspec":
        name, _, spec = server.partition("=")  # localspec:auto=ngram/suffix/draft: its own --spec-type
        method = name.partition(":")[2] or a.method
        cmd = [sys.executable, "-m", "localspec.cli", "serve", "-m", a.target, "--port", str(port), "-c", str(a.ctx),
               "-t", t, "-n", str(a.n_predict), "--log-level", "warning", "--method", method]
        if a.draft and method != "ar":
            cmd += ["-md", a.draft]
        own = ["--spec-type", spec.replace("/", ",")] if spec else []
        cmd += [f"--{f}" for f in flags]
        return cmd + (shlex.split(a.localspec_args) + own if method != "ar" else []), ""
    spec = server.partition(":")[2] or "none"
    binary = peer_tool("llama-server")
    if binary is None:
        return None, "llama-server not built (scripts/build_llama_cpp_peer.sh)"
    cmd = [str(binary), "-m", a.target, "--host", "127.0.0.1", "--port", str(port), "-c", str(a.ctx),
           "-np", "1", "-t", t, "-tb", t, "--no-webui", "--spec-type", spec]
    if spec == "draft-simple":
        if not a.draft:
            return None, "draft-simple needs -md"
        cmd += ["-md", a.draft, "-td", t, "-tbd", t]
    return cmd + shlex.split(a.peer_args), ""


@dataclass
class Live:
    """A started server and its row."""

    row: Row
    port: int
    proc: subprocess.Popen
    log: IO[str]


def interleaved(live: list[Live], ask: Callable[[Live], None]) -> None:
    """Ask each live server in turn (the same request, one at a time): a machine that drifts
    (another job, heat) drifts for every server alike; the next is asked once a localspec server
    is idle again (its prefetch of a guessed next request: server/fim_prefetch.py). A server
    that fails is dropped, why kept."""
    for x in list(live):
        try:
            ask(x)
            if x.row.server.startswith("localspec"):
                wait_idle(x.port)
        except (RuntimeError, OSError) as e:
            x.row.skipped = str(e)
            live.remove(x)


def bench_servers(servers: list[str], a: argparse.Namespace, holes: list[Hole]) -> list[Row]:
    """Start every server, then ask each hole (and each rhythm request) of all of them in
    turn; the typing simulation runs on the localspec servers alone, one after another."""
    rows, live = [], []
    try:
        for server in servers:
            port = _free_port()
            cmd, why = server_cmd(server, a, port)
            row = Row(server, cmd or [], why)
            rows.append(row)
            if cmd is None:
                continue
            proc, log = start_server(cmd)
            x = Live(row, port, proc, log)
            live.append(x)
            try:
                _wait_ready(port, proc, a.startup_timeout)
                post(port, WARM_UP)  # first-request costs are not the server's speed (and no hole is cached by it)
            except (RuntimeError, OSError) as e:
                row.skipped = str(e)
        ready = [x for x in live if not x.row.skipped]
        for h in [] if a.rhythm_only else holes:
            interleaved(ready, lambda x, h=h: x.row.samples.append(ask_one(x.port, h, a.n_predict)))
        if a.rhythm > 0:
            pause = 0.0 if a.no_pauses else a.interval_ms / 1e3
            runs = run_rhythm(ready, holes[: a.rhythm], a.words, a.n_predict, pause, post)
            for x in ready:
                x.row.rhythm = runs[id(x)].summary()
        for x in ready:
            if x.row.server.startswith("localspec") and a.typing > 0:
                x.row.typing = typing(x.port, holes[: a.typing], a.n_predict, a.interval_ms / 1e3, a.keys)
    finally:
        for x in live:
            stop_server(x.proc, x.log, x.row)
    return rows


def table(rows: list[dict]) -> str:
    best = min((r["latency_p50_ms"] for r in rows if not r["skipped"] and r["server"].startswith("llama-server")),
               default=0.0)
    lines = [f"{'server':26} {'holes':>5} {'p50':>8} {'p95':>8} {'tok/s':>6} {'exact':>6} {'vs best srv':>11} "
             f"{'no answer':>9} {'bound':>6}"]
    for r in rows:
        if r["skipped"]:
            lines.append(f"{r['server']:26} skipped: {r['skipped']}")
            continue
        x = f"{r['latency_p50_ms'] / best:.2f}x" if best > 0 else "-"
        lines.append(f"{r['server']:26} {r['holes']:>5} {r['latency_p50_ms']:>6.0f}ms {r['latency_p95_ms']:>6.0f}ms "
                     f"{r['tok_per_s']:>6.1f} {r['exact']:>6.0%} {x:>11} {bound_cells(r.get('free_p50_ms', 0.0), best)}")
    for r in rows:
        ty = r.get("typing")
        if ty:
            lines.append(f"typing ({r['server']}): {ty['keystrokes']} keystrokes every {ty['interval_ms']:.0f} ms; "
                         f"superseded completions ended {ty['stale_p50_ms']:.0f} ms (p50) / {ty['stale_max_ms']:.0f} ms "
                         f"(max) after their successor was sent, {ty['superseded_tokens_mean']:.1f} tokens each; "
                         f"last keystroke's completion {ty['final_latency_p50_ms']:.0f} ms (p50)")
    return "\n".join(lines + table_lines(rows))


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--target", default="qwen2.5-coder-1.5b", help="target model (name or path)")
    p.add_argument("-md", "--draft", default="qwen2.5-coder-0.5b", help="draft model ('' for none)")
    p.add_argument("--servers", default=DEFAULT_SERVERS,
                   help="comma-separated: localspec (--method), localspec:METHOD (e.g. localspec:ar), localspec:METHOD=T1/T2 (with "
                        "--spec-type T1,T2, e.g. localspec:auto=ngram/suffix/draft), +FLAG after a localspec one for `serve --FLAG` "
                        "(localspec+no-prefetch), llama-server:SPEC_TYPE (none, ngram-simple, ngram-map-k, "
                        "ngram-mod, ngram-cache, draft-simple)")
    p.add_argument("--holes", type=int, default=60, help="holes cut (both halves)")
    p.add_argument("--half", choices=("report", "tune", "all"), default="report",
                   help="which half is run (tune on `tune`, report on `report`)")
    p.add_argument("--seed", type=int, default=0, help="which holes are cut")
    p.add_argument("-n", "--n-predict", type=int, default=64)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=4096)
    p.add_argument("--method", default="auto", help="localspec serve's --method")
    p.add_argument("--localspec-args", default="", help="more `localspec serve` flags, e.g. '--spec-type suffix,draft'")
    p.add_argument("--peer-args", default="--poll 0", help="more llama-server flags")
    p.add_argument("--typing", type=int, default=3, help="holes of the typing simulation (0: none)")
    p.add_argument("--keys", type=int, default=6, help="keystrokes typed per hole")
    p.add_argument("--rhythm", type=int, default=0,
                   help="holes of the editor rhythm (every server): asked at the cursor, then after each typed word")
    p.add_argument("--rhythm-only", action="store_true", help="skip the holes' one-request latencies (the rhythm's cold requests remain)")
    p.add_argument("--words", type=int, default=3, help="words typed per rhythm hole (a request after each)")
    p.add_argument("--interval-ms", type=float, default=150.0,
                   help="time between keystrokes (the typing simulation's; the rhythm waits as long per typed character)")
    p.add_argument("--no-pauses", action="store_true",
                   help="rhythm: send each warm request the moment the answer before it came (no typing time)")
    p.add_argument("--startup-timeout", type=float, default=600.0)
    p.add_argument("--out", default=None, help="write the results as JSON here")


def main(a: argparse.Namespace) -> int:
    from localspec.errors import ConfigError
    from localspec.models import resolve_model

    if a.holes < 1 or a.n_predict < 1 or a.keys < 0 or a.interval_ms <= 0 or a.rhythm < 0 or a.words < 1:
        raise ConfigError("--holes, -n and --words must be >= 1, --keys and --rhythm >= 0, --interval-ms > 0")
    servers = [s.strip() for s in a.servers.split(",") if s.strip()]
    bad = [s for s in servers if s.partition("+")[0].partition(":")[0].partition("=")[0] not in ("localspec", "llama-server")
           or ("+" in s and not s.startswith("localspec"))]
    if bad:
        raise ConfigError(f"--servers: unknown {', '.join(bad)} (localspec[:METHOD], llama-server:SPEC_TYPE)")
    holes = [h for h in cut_holes(a.holes, a.seed) if a.half in ("all", h.half)]
    if not holes:
        raise ConfigError("no holes cut: raise --holes")
    a.target = str(resolve_model(a.target, fetch=True, progress=True))
    a.draft = str(resolve_model(a.draft, fetch=True, progress=True)) if a.draft else None
    rows = [r.summary() for r in bench_servers(servers, a, holes)]
    print(table(rows))
    if a.out:
        write_json(a.out, {"bench": "fim", "machine": machine_info(a.threads), "holes": [h.to_json() for h in holes],
                           "args": {k: v for k, v in vars(a).items() if k != "func"}, "rows": rows})
    return 0
