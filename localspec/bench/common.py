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

from localspec.constrain.spec import ConstraintSpec


@dataclass
class Prompt:
    """One bench prompt: a user turn (chat-templated by the session) or raw text.

    `schema`: the JSON schema the answer must match (the structured set): every localspec
    run of the prompt decodes under it and the llama.cpp peer gets it as `--json-schema`.
    `half`: "tune" or "report" where the set is split (docs/bench.md#structured-output).
    """

    dataset: str
    id: str
    text: str
    chat: bool = True  # False: raw completion (the plain-text dataset)
    schema: dict | None = None
    half: str = ""

    @property
    def schema_text(self) -> str | None:
        """The schema as JSON text (what GenConfig.constraint and llama.cpp's flag get)."""
        return None if self.schema is None else json.dumps(self.schema, ensure_ascii=False)

    @property
    def constraint(self) -> ConstraintSpec | None:
        """The constraint every run of this prompt decodes under (None: unconstrained)."""
        text = self.schema_text
        return None if text is None else ConstraintSpec("json_schema", text, origin=f"prompt {self.id}'s schema")


def read_jsonl(name: str) -> list[dict]:
    """Rows of a prompt file shipped in localspec/bench/prompts/."""
    raw = resources.files("localspec.bench").joinpath(f"prompts/{name}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


# shipped sets in their own file, read only when --kinds names them: the default set stays
# the speed set (bench serve, slots and ceiling read it too and apply no schema)
OWN_FILE_KINDS = ("structured",)
HALVES = ("tune", "report")
# the split sets, each halved into a tuning and a report half that never change (issue 40):
# a policy is tuned on one and judged on the other. `--half` reads these instead of the
# speed set (whose prompts the policy was tuned on); scripts/make_split_prompts.py wrote
# the edit and code sets from HumanEval 0-39 (tune) and 40-99 (report)
SPLIT_FILES = {"edit": "split-edit", "code": "split-code", "chat": "split-chat", "structured": "structured"}
# split sets read only when --kinds names them: the edit set's requests on 1,600-2,600-token
# files (scripts/make_long_edits.py; each prompt's whole context is evaluated per column)
NAMED_SPLIT_FILES = {"long-edit": "split-long-edit"}


def load_prompts(path: str | None, kinds: list[str] | None = None, limit: int | None = None,
                 half: str | None = None) -> list[Prompt]:  # fmt: skip
    """Chat prompts from a JSONL file of {id, kind, prompt} and optionally {schema, half}
    (default: the shipped speed set, plus prompts/structured.jsonl when `kinds` names
    "structured"). `half` ("tune" / "report"): only the rows of that half, from the shipped
    split sets (SPLIT_FILES: those `kinds` names, else all) when no file is given; `limit`:
    the first N rows left after the kind and half filters."""
    if path:
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    elif half:
        rows = [r for k, name in SPLIT_FILES.items() if not kinds or k in kinds for r in read_jsonl(name)]
        rows += [r for k, name in NAMED_SPLIT_FILES.items() if kinds and k in kinds for r in read_jsonl(name)]
    else:
        rows = read_jsonl("speed") + [r for k in OWN_FILE_KINDS if kinds and k in kinds for r in read_jsonl(k)]
    if kinds:
        rows = [r for r in rows if r.get("kind") in kinds]
    if half:
        rows = [r for r in rows if r.get("half") == half]
    return [Prompt(r.get("kind", ""), r["id"], r["prompt"], schema=r.get("schema"), half=r.get("half", ""))
            for r in (rows[:limit] if limit else rows)]


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
