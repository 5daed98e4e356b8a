"""Shared bench helpers: prompts, machine info, medians, result files."""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path


@dataclass
class Prompt:
    """One bench prompt: a user turn (chat-templated by the session) or raw text."""

    dataset: str
    id: str
    text: str
    chat: bool = True  # False: raw completion (the plain-text dataset)


def read_jsonl(name: str) -> list[dict]:
    """Rows of a prompt file shipped in localspec/bench/prompts/."""
    raw = resources.files("localspec.bench").joinpath(f"prompts/{name}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def load_prompts(path: str | None, kinds: list[str] | None = None, limit: int | None = None) -> list[Prompt]:
    """Chat prompts from a JSONL file of {id, kind, prompt} (default: the shipped speed set)."""
    if path:
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        rows = read_jsonl("speed")
    if kinds:
        rows = [r for r in rows if r.get("kind") in kinds]
    return [Prompt(r.get("kind", ""), r["id"], r["prompt"]) for r in (rows[:limit] if limit else rows)]


def machine_info(threads: int | None) -> dict:
    """CPU, threads, versions: every result file says where it was measured."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        llama = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        llama = "?"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "python": platform.python_version(),
        "llama_cpp_python": llama,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": "localspec " + shlex.join(sys.argv[1:]) if sys.argv and "localspec" in sys.argv[0] else shlex.join(sys.argv),
    }


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def write_json(path: str | Path, payload: dict) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(payload, indent=1))


def add_placement_args(p) -> None:
    """The load flags `run` has that decide where the models compute (GPU offload, RPC
    servers, --recalibrate): a bench measures the placement the user will run."""
    from localspec.flags.offload import add_offload_args
    from localspec.flags.rpc import add_rpc_arg

    add_offload_args(p)
    add_rpc_arg(p)
    p.add_argument("--rpc-rtt-ms", type=float, default=None, metavar="MS",
                   help="put a loopback proxy adding this round-trip time in front of each --rpc server "
                   "(a LAN ~0.5, Wi-Fi ~5): how speculation hides the network")
    p.add_argument("--recalibrate", action="store_true", help="re-time the cost model's curves first")


def session_options(a, n_ctx: int | None = None):
    """SessionOptions for a bench run: its --ctx/--threads plus the placement flags."""
    from localspec.flags.offload import load_options
    from localspec.session import SessionOptions

    target_load, draft_load = load_options(a)
    rpc = list(getattr(a, "rpc", None) or [])
    rtt = getattr(a, "rpc_rtt_ms", None)
    if rpc and rtt is not None:
        from localspec.bench.netdelay import DelayProxy

        proxies = [DelayProxy(ep, rtt) for ep in rpc]  # live as long as the bench process
        _PROXIES.extend(proxies)
        rpc = [p.endpoint for p in proxies]
    return SessionOptions(n_ctx=n_ctx or a.ctx, threads=a.threads, target_load=target_load, draft_load=draft_load,
                          rpc=rpc, recalibrate=getattr(a, "recalibrate", False))


_PROXIES: list = []
