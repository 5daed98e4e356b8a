"""Runs in a subprocess for tests/test_vulkan.py, with GGML_VK_VISIBLE_DEVICES set (ggml reads it
once, when its backend registry starts, so the pytest process itself never sees Vulkan0).

    python -m tests.support.vulkan_worker devices
    python -m tests.support.vulkan_worker plan TARGET CTX
    python -m tests.support.vulkan_worker greedy TARGET DRAFT N

Prints one JSON object on stdout; llama.cpp's log (verbose) goes to stderr, where the
tests read how many layers llama.cpp itself says it offloaded.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from localspec.backend import devices as devs
from localspec.backend.logs import configure_logging
from localspec.backend.offload import plan_models
from localspec.config import GenConfig, SamplingConfig
from localspec.costmodel.curves import curve_path
from localspec.events import Done
from localspec.loading import open_session
from localspec.placement.load import LoadOptions
from localspec.session import SessionOptions

PROMPT = "Write a short poem about the sea."


def _devices() -> dict:
    return {"backends": devs.backends(), "devices": [dataclasses.asdict(d) for d in devs.devices()]}


def _plan(target: str, ctx: int) -> dict:
    pl = plan_models(SessionOptions(n_ctx=ctx), [("target", Path(target), LoadOptions())])[0]
    return {**_devices(), "layers": pl.layers, "n_gpu_layers": pl.n_gpu_layers, "memory": pl.memory,
            "summary": pl.summary()}


def _greedy(target: str, draft: str, n: int) -> dict:
    """The target on Vulkan0 (every layer), the draft on the CPU (-devd none): AR, sd and
    mdbv greedy on the device; then AR with the target on the CPU, for agreement."""
    out: dict = {}
    on_dev = SessionOptions(n_ctx=512, threads=2, verbose=True, target_load=LoadOptions(gpu_layers="all", devices=["Vulkan0"]),
                            draft_load=LoadOptions(devices=["none"]))
    sess = open_session(target, draft, on_dev)
    try:
        out["placement"] = dict(sess.placement)
        out["target_curve"] = curve_path(sess.target.ctx).name
        out["draft_curve"] = curve_path(sess.draft.ctx).name
        greedy = SamplingConfig(temp=0.0)
        runs = {"ar": GenConfig(method="ar", n_predict=n, sampling=greedy),
                "sd": GenConfig(method="sd", K=1, L=4, n_predict=n, dynamic_draft=False, sampling=greedy),
                "mdbv": GenConfig(method="mdbv", K=2, L=4, n_predict=n, dynamic_draft=False, sampling=greedy)}
        for name, cfg in runs.items():
            done = [e for e in sess.complete(PROMPT, cfg) if isinstance(e, Done)][-1]
            out[name] = {"text": done.text, "tokens": list(sess.last_tokens), "calls": done.stats.target_calls}
        prompt = list(sess.last_prompt_tokens)
        out["prompt_tokens"] = prompt
        out["vulkan_rows"] = _rows(sess.target.ctx, prompt, out["ar"]["tokens"],
                                   {m: out[m]["tokens"] for m in ("sd", "mdbv")})
    finally:
        sess.close()
    cpu = SessionOptions(n_ctx=512, threads=2, verbose=True, target_load=LoadOptions(devices=["none"]))
    sess = open_session(target, None, cpu)
    try:
        cfg = GenConfig(method="ar", n_predict=n, sampling=SamplingConfig(temp=0.0))
        done = [e for e in sess.complete(PROMPT, cfg) if isinstance(e, Done)][-1]
        out["cpu_ar"] = {"text": done.text, "tokens": list(sess.last_tokens)}
        out["cpu_curve"] = curve_path(sess.target.ctx).name
        cpu_first = _rows(sess.target.ctx, out["prompt_tokens"], out["ar"]["tokens"], {})["first_row"]
    finally:
        sess.close()
    dev_first = out["vulkan_rows"].pop("first_row")
    out["first_row"] = {  # the first generated position, Vulkan0 vs CPU (not copied out: 49k floats)
        "corr": float(np.corrcoef(dev_first, cpu_first)[0, 1]),
        "max_abs": float(np.abs(dev_first - cpu_first).max()),
        "argmax": [int(dev_first.argmax()), int(cpu_first.argmax())],
        "cpu_rank_of_device_argmax": int((cpu_first > cpu_first[dev_first.argmax()]).sum()),
    }
    return out


def _rows(ctx, prompt: list[int], ar: list[int], others: dict[str, list[int]]) -> dict:
    """The logits of the prompt's last row (to compare devices), and for each method whose
    tokens left AR's, the logit gap between the two tokens where they parted (the
    batch-numerics rule: a divergence is allowed only at a near-tie)."""
    def last_row(tokens: list[int]) -> np.ndarray:
        ctx.clear()
        row = ctx.batch.clear().add_sequence(tokens, 0, 0, logits_last=True)
        ctx.decode()
        return np.array(ctx.logits(row), dtype=np.float64)

    out: dict = {"first_row": last_row(prompt), "gaps": {}}
    for name, toks in others.items():
        i = next((j for j in range(min(len(ar), len(toks))) if ar[j] != toks[j]), None)
        if i is not None:
            row = last_row(prompt + ar[:i])
            out["gaps"][name] = abs(float(row[ar[i]] - row[toks[i]]))
    return out


def main(argv: list[str]) -> int:
    configure_logging(True)  # llama.cpp's own account of the placement, on stderr
    cmd, *rest = argv
    if cmd == "devices":
        out = _devices()
    elif cmd == "plan":
        out = _plan(rest[0], int(rest[1]))
    elif cmd == "greedy":
        out = _greedy(rest[0], rest[1], int(rest[2]))
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
