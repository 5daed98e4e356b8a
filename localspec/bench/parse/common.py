"""What every `bench parse` step shares: the session, the generation settings, the visible
answer, and the JSON-lines result files under --out (appended to, so every step resumes)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from localspec.bench import humaneval as he
from localspec.config import GenConfig, ParseConfig

DEFAULT_OUT = "bench-parse"
N_PREDICT = 400


def open_pair(target: str, draft: str | None, threads: int | None, n_ctx: int = 2048, n_batch: int = 512):
    """The loaded pair every step measures on (a RuntimeSession: the probe reads its parts)."""
    from localspec.loading import open_session
    from localspec.session import SessionOptions

    return open_session(target, draft, SessionOptions(n_ctx=n_ctx, n_batch=n_batch, threads=threads))


def base_cfg(**parse_kw) -> GenConfig:
    return GenConfig(method="ar", n_predict=N_PREDICT, seed=0, stop=list(he.STOP), parse=ParseConfig(**parse_kw))


def visible(text: str) -> str:
    """The answer as the emitter shows it: cut at the first stop string."""
    for s in he.STOP:
        i = text.find(s)
        if i >= 0:
            text = text[:i]
    return text


def records(args: argparse.Namespace, step: str) -> Path:
    """The JSON-lines file of a step ("calibrate" or "report") for this pair's --tag."""
    return Path(args.out) / f"{step}-{args.tag}.jsonl"


def append(path: Path, rec: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")


def load(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
