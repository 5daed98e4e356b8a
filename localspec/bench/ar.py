"""`localspec bench ar`: plain decoding through localspec vs llama.cpp's llama-bench.

The difference per token is what Python (sampling, events, bookkeeping) costs on top of
llama.cpp itself; both run the same kernels (the peer is built from the same sources).
"""

from __future__ import annotations

import argparse
import sys

from localspec.bench.common import load_prompts, machine_info, median, write_json
from localspec.bench.runner import drain, session_prompt
from localspec.config import GenConfig


def main(a: argparse.Namespace) -> int:
    from localspec.bench import llama_bench, peer
    from localspec.loading import open_session
    from localspec.models import resolve_model
    from localspec.session import SessionOptions

    prompts = load_prompts(None, ["code"], a.limit)
    rows = []
    for name in a.models:
        path = resolve_model(name)
        sess = open_session(name, None, SessionOptions(threads=a.threads))
        rates, overhead = [], []
        for p in prompts:
            done = drain(sess.generate(session_prompt(p), GenConfig(method="ar", n_predict=a.n_predict)))
            rates.append(done.stats.tok_per_s)
            overhead.append(1e3 * done.stats.overhead_seconds / max(done.stats.iterations, 1))
        sess.close()
        ours = median(rates)
        ref = None
        if peer.peer_binaries() is not None:
            tg = [r for r in llama_bench.run_llama_bench(path, a.threads, n_prompt=(), n_gen=(a.n_predict,), repetitions=3) if r.n_gen]
            ref = tg[0].avg_ts if tg else None
        rows.append({
            "model": name, "localspec_tok_per_s": ours, "llama_bench_tg_tok_per_s": ref,
            "ratio": ours / ref if ref else None,
            "python_ms_per_token": (1e3 / ours - 1e3 / ref) if ref else None,
            "loop_overhead_ms_per_token": median(overhead),
        })  # fmt: skip
    print("| model | localspec AR tok/s | llama-bench tg tok/s | ratio | extra ms/token | sampling+bookkeeping ms/token |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ref = "n/a (peer not built)" if r["llama_bench_tg_tok_per_s"] is None else f"{r['llama_bench_tg_tok_per_s']:.1f}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        extra = "" if r["python_ms_per_token"] is None else f"{r['python_ms_per_token']:.2f}"
        print(f"| {r['model']} | {r['localspec_tok_per_s']:.1f} | {ref} | {ratio} | {extra} | {r['loop_overhead_ms_per_token']:.2f} |")
    if a.out:
        write_json(a.out, {"machine": machine_info(a.threads), "rows": rows})
        print(f"wrote {a.out}", file=sys.stderr)
    return 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("models", nargs="*", default=["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"])
    p.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=3, help="code prompts (median over them)")
    p.add_argument("--out", default=None)
