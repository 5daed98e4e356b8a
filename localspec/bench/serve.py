"""`localspec bench serve`: N concurrent streaming clients x M chat requests against servers.

Each server under test is started as its own process on a free port (the same model file,
threads and context per request for all), driven by N client threads that each send M
streaming chat requests over the shipped chat prompts, then stopped. Per server: requests/s,
aggregate tok/s (all completion tokens over the run's wall time) and its ratio to localspec
with one slot and to llama-server, p50/p95 time to first token (and p50 over a lone
request's), total latency, per-request decode tok/s, and a tally (sent = completed +
dropped + errors, 5xx counted) with the server's RSS before and after the load.

Servers: `localspec` (the flags' method, auto by default, `--np` slots when `localspec
serve` has a slots flag), `localspec-1` (the same with one slot), `localspec-ar` (`--method
ar`), `llama-server` (llama.cpp's own server built by scripts/build_llama_cpp_peer.sh from
the same sources, `-np N`, `-md DRAFT`) and `llama-cpp` (`python -m llama_cpp.server`).
A server that cannot run here is listed as skipped with the reason.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

from localspec.bench.common import load_prompts, machine_info, write_json
from localspec.bench.serve_clients import Result, Sample, run_load, stream_chat, tree_rss_kib
from localspec.bench.serve_peer import server_cmd

__all__ = ["SERVERS", "Result", "Sample", "main", "stream_chat", "summary", "table"]

SERVERS = ("localspec", "localspec-1", "localspec-ar", "llama-server", "llama-cpp")
DEFAULT_SERVERS = ("localspec", "localspec-ar", "llama-server", "llama-cpp")
LONE_REQUESTS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def lone_ttft(port: int, prompts: list[str], n: int = LONE_REQUESTS) -> float:
    """Median TTFT of n requests sent one at a time: the reference for "TTFT with all
    slots busy <= 2x a lone request's" (a slot server's prefill competes with its other
    slots' decoding; one worker's queue makes clients wait whole answers). Same prompts
    as the load's first requests, each tagged as unique (see run_load), so prompt length
    and prefix caching are the same for the lone and the loaded requests."""
    ts = sorted(stream_chat(port, f"[lone {i}] {prompts[i % len(prompts)]}", 8).ttft for i in range(n))
    return ts[len(ts) // 2]


def bench_one(kind: str, a: argparse.Namespace, prompts: list[str]) -> Result:
    """Start one server, warm it up, time lone requests, run the load, stop it."""
    port = _free_port()
    cmd, slots, why = server_cmd(kind, a, port)
    res = Result(kind, slots=slots, skipped=why, command=cmd or [])
    if cmd is None:
        return res
    if kind == "localspec" and a.np > 1 and slots == 1:
        res.note = "localspec serve has no slots flag (-np/--parallel): ran with one slot"
    proc, log = start_server(cmd)
    try:
        _wait_ready(port, proc, a.startup_timeout)
        stream_chat(port, prompts[0], 4)  # warm-up (first-request costs are not the server's speed)
        res.lone_ttft = lone_ttft(port, prompts)
        res.rss_before_kib = tree_rss_kib(proc.pid)
        run_load(port, prompts, a.clients, a.requests, a.n_predict, res, disconnects=a.disconnects, seed=a.seed)
        time.sleep(a.settle)  # let the server finish cancelling dropped requests
        res.rss_after_kib = tree_rss_kib(proc.pid)
        if proc.poll() is not None:  # a note, not an error: the tally counts requests
            res.note = "; ".join(x for x in (res.note, f"server died during the load (exit {proc.returncode})") if x)
    except (RuntimeError, OSError) as e:
        res.skipped = str(e)
    finally:
        stop_server(proc, log, res)
    return res


def start_server(cmd: list[str]) -> tuple[subprocess.Popen, IO[str]]:
    """Start a server; its stderr goes to a file, not a pipe: llama-server logs every request,
    and a pipe nobody reads fills (64 KiB) and blocks the server mid-load."""
    log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log), log


def stop_server(proc: subprocess.Popen, log: IO[str], res: Any) -> None:
    """Stop a server the bench started; a skipped `res` gets its stderr's last line (why)."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.seek(0)
    err = log.read().strip()
    log.close()
    if res.skipped and err:
        res.skipped += " | " + err.splitlines()[-1]


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def summary(res: Result) -> dict:
    """One row of the table and the JSON (ratios are added by add_ratios over all rows)."""
    s = res.completed
    row = {
        "server": res.server,
        "slots": res.slots,
        "requests": len(s),
        "requests_per_s": len(s) / res.wall if res.wall > 0 else 0.0,
        "aggregate_tok_per_s": res.aggregate_tok_per_s(),
        "ttft_p50_ms": _pct([x.ttft for x in s], 0.5) * 1e3,
        "ttft_p95_ms": _pct([x.ttft for x in s], 0.95) * 1e3,
        "lone_ttft_ms": res.lone_ttft * 1e3,
        "latency_p50_ms": _pct([x.latency for x in s], 0.5) * 1e3,
        "latency_p95_ms": _pct([x.latency for x in s], 0.95) * 1e3,
        "tok_per_s_per_request": sum(x.tok_per_s for x in s) / len(s) if s else 0.0,
        "drafted": sum(x.drafted for x in s),
        # accepted / drafted from each answer's `timings`: shows that a draft really drafts
        "acceptance": sum(x.accepted for x in s) / d if (d := sum(x.drafted for x in s)) else None,
        "rss_before_mib": res.rss_before_kib / 1024,
        "rss_after_mib": res.rss_after_kib / 1024,
        "error_messages": res.errors[:20],
        "command": shlex.join(res.command) if res.command else "",
        "note": res.note,
        "skipped": res.skipped,
    }
    tally = res.tally()
    row.update(tally, errors=sum(tally["errors"].values()), errors_by_kind=tally["errors"])
    return row


def add_ratios(rows: list[dict]) -> None:
    """x_localspec_1slot / x_llama_server: each row's aggregate tok/s over the reference
    row's (the first localspec or localspec-1 row that ran with one slot; the llama-server
    row), None where the reference did not run."""
    def ref(pred) -> float:
        return next((r["aggregate_tok_per_s"] for r in rows if not r["skipped"] and pred(r)), 0.0)

    ls1 = ref(lambda r: r["server"] in ("localspec", "localspec-1") and r["slots"] == 1)
    srv = ref(lambda r: r["server"] == "llama-server")
    for r in rows:
        agg = r.get("aggregate_tok_per_s", 0.0)
        r["x_localspec_1slot"] = agg / ls1 if ls1 > 0 and not r["skipped"] else None
        r["x_llama_server"] = agg / srv if srv > 0 and not r["skipped"] else None


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else "-"


def _pct_str(v: float | None) -> str:
    return f"{v:.0%}" if v is not None else "-"


def table(rows: list[dict]) -> str:
    """Speed table, then the tally/memory table (the disconnect mode's evidence)."""
    head = (f"{'server':13} {'np':>2} {'req':>4} {'req/s':>6} {'agg t/s':>7} {'vs ls1':>6} {'vs srv':>6} "
            f"{'TTFT p50':>9} {'p95':>7} {'lone':>6} {'lat p50':>8} {'p95':>7} {'t/s/req':>7} {'accept':>6}")
    lines = [head]
    for r in rows:
        if r["skipped"]:
            lines.append(f"{r['server']:13} skipped: {r['skipped']}")
            continue
        lines.append(f"{r['server']:13} {r['slots']:>2} {r['requests']:>4} {r['requests_per_s']:>6.2f} "
                     f"{r['aggregate_tok_per_s']:>7.1f} {_x(r.get('x_localspec_1slot')):>6} "
                     f"{_x(r.get('x_llama_server')):>6} {r['ttft_p50_ms']:>7.0f}ms {r['ttft_p95_ms']:>5.0f}ms "
                     f"{r['lone_ttft_ms']:>4.0f}ms {r['latency_p50_ms']:>6.0f}ms {r['latency_p95_ms']:>5.0f}ms "
                     f"{r['tok_per_s_per_request']:>7.1f} {_pct_str(r.get('acceptance')):>6}")
    ran = [r for r in rows if not r["skipped"]]
    if ran:
        lines += ["", f"{'server':13} {'sent':>4} {'done':>4} {'drop':>4} {'err':>4} {'5xx':>4} {'lost':>4} "
                      f"{'RSS before':>10} {'after':>8}  errors"]
        for r in ran:
            kinds = ", ".join(f"{k} x{n}" for k, n in r["errors_by_kind"].items()) or "-"
            lines.append(f"{r['server']:13} {r['sent']:>4} {r['completed']:>4} {r['dropped']:>4} {r['errors']:>4} "
                         f"{r['server_errors']:>4} {r['lost']:>4} {r['rss_before_mib']:>7.0f}MiB "
                         f"{r['rss_after_mib']:>5.0f}MiB  {kinds}")
    lines += [f"note: {r['server']}: {r['note']}" for r in ran if r["note"]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="localspec bench serve", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-m", "--target", required=True, help="target model (registry name or .gguf path)")
    p.add_argument("-md", "--draft", default=None, help="draft model of the localspec and llama-server servers")
    p.add_argument("--method", default="auto", help="method of the `localspec` server")
    p.add_argument("--clients", "-N", type=int, default=4, help="concurrent clients")
    p.add_argument("--requests", "-M", type=int, default=3, help="chat requests per client")
    p.add_argument("-n", "--n-predict", "--max-tokens", dest="n_predict", type=int, default=128,
                   help="max_tokens of each request")
    p.add_argument("--np", type=int, default=None,
                   help="slots of llama-server and of `localspec` (when its serve has -np); default: --clients")
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1, help="threads of every server")
    p.add_argument("-c", "--ctx", type=int, default=4096,
                   help="context of each request's slot (llama-server gets -c ctx*np: it splits -c over its slots)")
    p.add_argument("--servers", default=",".join(DEFAULT_SERVERS), help=f"comma-separated subset of {', '.join(SERVERS)}")
    p.add_argument("--disconnects", type=float, default=0.0, metavar="P",
                   help="each request hangs up mid-stream with probability P (seeded by --seed)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --disconnects choices")
    p.add_argument("--settle", type=float, default=1.0, metavar="S",
                   help="seconds after the load before the RSS 'after' reading")
    p.add_argument("--peer-draft-max", type=int, default=16, help="llama-server --spec-draft-n-max")
    p.add_argument("--peer-draft-min", type=int, default=0, help="llama-server --spec-draft-n-min")
    p.add_argument("--peer-p-min", type=float, default=0.75, help="llama-server --spec-draft-p-min")
    p.add_argument("--peer-args", default="", metavar="ARGS",
                   help="extra llama-server arguments, one shell-quoted string (e.g. --peer-args='--poll 0')")
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
    a.np = a.clients if a.np is None else a.np
    if bad or a.clients < 1 or a.requests < 1 or a.n_predict < 1 or a.np < 1:
        raise ConfigError(f"--servers must be from {', '.join(SERVERS)}; --clients/--requests/-n/--np >= 1")
    if not 0.0 <= a.disconnects <= 1.0:
        raise ConfigError(f"--disconnects is a probability in [0, 1], got {a.disconnects}")
    a.target = str(resolve_model(a.target, fetch=True, progress=True))  # one file for every server
    if a.draft:
        a.draft = str(resolve_model(a.draft, fetch=True, progress=True))
    prompts = [p.text for p in load_prompts(a.prompts)]
    rows = []
    seen: dict[str, str] = {}
    for kind in kinds:
        cmd = server_cmd(kind, a, 0)[0]
        key = shlex.join(cmd) if cmd else kind
        if key in seen:  # e.g. localspec == localspec-1 when `localspec serve` has no slots flag
            rows.append(summary(Result(kind, skipped=f"same command as {seen[key]}")))
            continue
        seen[key] = kind
        print(f"bench serve: {kind} ({a.clients} clients x {a.requests} requests, -n {a.n_predict}"
              f"{f', disconnects {a.disconnects:g}' if a.disconnects else ''})", file=sys.stderr)
        rows.append(summary(bench_one(kind, a, prompts)))
    add_ratios(rows)
    print(table(rows))
    if a.json:
        write_json(a.json, {"machine": machine_info(a.threads), "args": vars(a), "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
