"""What asking for log-probabilities costs per token (docs/performance.md#logprobs).

Two figures: the Python work per emitted token (decode/logprobs.row_logprob on a real logits
row of the model, N alternatives), and a greedy generation's seconds per token with
logprobs off / on, interleaved runs (the machine's noise hits both alike).

    python scripts/logprobs_cost.py [MODEL] [-n TOKENS] [--runs R] [--rows-only]
"""

from __future__ import annotations

import argparse
import statistics
import time

from localspec.backend import Context, Model
from localspec.config import GenConfig, SamplingConfig
from localspec.decode.logprobs import row_logprob
from localspec.models import resolve_model
from localspec.runtime import RuntimeSession
from localspec.session import SessionOptions

PROMPT = [{"role": "user", "content": "Write a Python function that merges two sorted lists."}]


def per_row(model: Model, n_top: int, reps: int = 400) -> float:
    """Seconds of one row_logprob on the model's own logits row."""
    ctx = Context(model, n_ctx=256, n_batch=64, n_seq_max=1, threads=1)
    toks = model.tokenize("def merge(a, b):", add_special=True)
    row_id = ctx.batch.clear().add_sequence(toks, 0, 0, True)
    ctx.decode()
    row = ctx.logits(row_id)
    row_logprob(model, row, 0, n_top)  # warm the piece cache
    t0 = time.perf_counter()
    for i in range(reps):
        row_logprob(model, row, i, n_top)
    ctx.close()
    return (time.perf_counter() - t0) / reps


def per_token(sess: RuntimeSession, n: int, logprobs: int | None) -> float:
    cfg = GenConfig(method="ar", n_predict=n, sampling=SamplingConfig(temp=0.0), logprobs=logprobs)
    done = list(sess.generate(PROMPT, cfg))[-1]
    return done.stats.seconds / max(done.stats.n_tokens, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="qwen2.5-coder-0.5b")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rows-only", action="store_true", help="the per-row figure alone (no generation)")
    args = ap.parse_args()
    model = Model(resolve_model(args.model))
    print(f"{args.model}: vocabulary {model.n_vocab}")
    for n_top in (0, 5, 20):
        print(f"  row_logprob, {n_top:2d} alternatives: {per_row(model, n_top) * 1e3:.3f} ms/token")
    if args.rows_only:
        return
    sess = RuntimeSession(model, None, SessionOptions(n_ctx=1024))
    per_token(sess, 8, None)  # warm up
    runs: dict[str, list[float]] = {"off": [], "on (5 alternatives)": []}
    for _ in range(args.runs):
        runs["off"].append(per_token(sess, args.n, None))
        runs["on (5 alternatives)"].append(per_token(sess, args.n, 5))
    for name, xs in runs.items():
        print(f"  AR, logprobs {name}: {statistics.median(xs) * 1e3:.2f} ms/token (median of {len(xs)})")
    sess.close()


if __name__ == "__main__":
    main()
