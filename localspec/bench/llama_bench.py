"""llama.cpp's `llama-bench` as the reference for plain decoding and batch costs.

tg rows give the AR speed llama.cpp itself reaches on a model (what `bench ar` compares
localspec's AR loop with), pp rows the cost of evaluating one batch. Same binaries,
location rules and error messages as the speculative peer (peer.py).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localspec.bench.peer import (
    BENCH_BIN,
    TAIL_CHARS,
    PeerRunError,
    require_peer_binaries,
    run_tool,
)


@dataclass
class BenchRow:
    """One llama-bench test: 'pp64' = one batch of 64 prompt tokens, 'tg128' = 128 decode
    steps of one token. pp rows give the verify cost of a batch, tg rows the AR speed."""

    test: str
    n_prompt: int
    n_gen: int
    n_batch: int
    n_ubatch: int
    n_threads: int
    avg_ts: float
    stddev_ts: float
    samples_ts: list[float] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


def parse_llama_bench_json(text: str) -> list[BenchRow]:
    """Rows from `llama-bench -o json` (a JSON array, one object per test)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PeerRunError(
            f"{BENCH_BIN} did not print JSON ({e}); got:\n{text[-TAIL_CHARS:]}"
        ) from None
    if not isinstance(data, list):
        raise PeerRunError(f"{BENCH_BIN} JSON is not a list of tests: {text[:200]}")
    rows = []
    for d in data:
        n_prompt, n_gen = int(d.get("n_prompt", 0)), int(d.get("n_gen", 0))
        if n_prompt and n_gen:
            test = f"pp{n_prompt}+tg{n_gen}"
        else:
            test = f"pp{n_prompt}" if n_prompt else f"tg{n_gen}"
        rows.append(
            BenchRow(
                test=test,
                n_prompt=n_prompt,
                n_gen=n_gen,
                n_batch=int(d.get("n_batch", 0)),
                n_ubatch=int(d.get("n_ubatch", 0)),
                n_threads=int(d.get("n_threads", 0)),
                avg_ts=float(d["avg_ts"]),
                stddev_ts=float(d.get("stddev_ts", 0.0)),
                samples_ts=[float(x) for x in d.get("samples_ts", [])],
                raw=d,
            )
        )
    return rows


def run_llama_bench(
    model: Path,
    threads: int,
    n_prompt: Sequence[int] = (8, 16, 64),
    n_gen: Sequence[int] = (128,),
    batch_sizes: Sequence[int] = (),
    ubatch_sizes: Sequence[int] = (),
    repetitions: int = 5,
    *,
    timeout: float = 1800.0,
    extra_args: Sequence[str] = (),
) -> list[BenchRow]:
    """AR decode speed (tg) and batch cost (pp) of one model, as llama.cpp measures them.

    Empty n_prompt / n_gen skips that kind of test (passed as 0: llama-bench's defaults of
    512 / 128 would otherwise run). batch_sizes / ubatch_sizes map to -b / -ub; empty keeps
    llama-bench's defaults (2048 / 512), under which a pp test is one batch of n_prompt.
    """
    if not Path(model).is_file():
        raise PeerRunError(f"model file not found: {model}")
    binary = require_peer_binaries()[BENCH_BIN]

    def csv(xs: Sequence[int]) -> str:
        return ",".join(str(int(x)) for x in xs) or "0"

    cmd = [str(binary), "-m", str(model), "-t", str(threads), "-p", csv(n_prompt),
           "-n", csv(n_gen), "-r", str(repetitions), "-o", "json"]  # fmt: skip
    if batch_sizes:
        cmd += ["-b", csv(batch_sizes)]
    if ubatch_sizes:
        cmd += ["-ub", csv(ubatch_sizes)]
    cmd += list(extra_args)
    out = run_tool(cmd, timeout=timeout)
    if out.returncode != 0:
        raise PeerRunError(
            f"{BENCH_BIN} exited with code {out.returncode} ({shlex.join(cmd)}); "
            f"tail:\n{(out.stdout + out.stderr)[-TAIL_CHARS:]}"
        )
    return parse_llama_bench_json(out.stdout)
