"""`localspec bench slots`: what `serve -np N`'s rounds cost, per method, without HTTP.

Why: `bench serve` measures the server as a client sees it; this measures the pool under
it (localspec/pool.py), so a method's in-round cost is seen apart from the HTTP, queue and
dispatcher: C concurrent generations on an N-slot pool, each a shipped prompt (greedy,
-n tokens), one method at a time, each slot's prompt evaluated and cached first (the timed
part is the decoding rounds). Per method: wall time, aggregate tok/s,
what each slot ran (auto's choice), and the target's and draft's llama_decode calls (count,
tokens per call). It is the evidence behind costmodel/inround.py's pricing: on a
compute-bound round every method lands near the same aggregate, and `auto` must not lose
to AR there; with C = 1 on the same pool, auto must beat AR (a lone slot speculates).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import replace

from localspec.bench.common import load_prompts, machine_info, write_json
from localspec.bench.runner import Spec
from localspec.config import GenConfig
from localspec.errors import ConfigError
from localspec.pool import open_pool
from localspec.session import SessionOptions


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--target", required=True, help="target model (registry name or .gguf path)")
    p.add_argument("-md", "--draft", default=None, help="draft model")
    p.add_argument("--np", type=int, default=4, help="slots of the pool")
    p.add_argument("--concurrent", "-C", type=int, default=None, help="generations at once (default: --np)")
    p.add_argument("--methods", nargs="+", default=["ar", "auto", "sd:2", "sd:4"],
                   help="methods to run, one after another: ar, auto, or METHOD[+SPEC-TYPE][:L] "
                        "(sd:4, sd+suffix:16, auto+suffix,draft)")
    p.add_argument("-n", "--n-predict", type=int, default=128, help="tokens per generation")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=4096, help="positions per slot")
    p.add_argument("--kinds", nargs="+", default=None, help="prompt kinds (default: all)")
    p.add_argument("--rotate", action="store_true",
                   help="run each suffix method twice, the second time slot i answering slot i+1's prompt: "
                        "what the shared suffix store gives a request another slot answered (sd+suffix:16)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results here")


def _cfg(spec: str, n: int) -> GenConfig:
    """METHOD[+SPEC-TYPE][:L] (`sd:4`, `sd+suffix:16`, `auto+suffix,draft`) -> a greedy config,
    built as `bench speed` builds its columns (runner.Spec)."""
    head, _, L = spec.partition(":")
    method, _, via = head.partition("+")
    cfg = Spec(method, 1, int(L or 8), 0.0, free=method == "auto", proposers=via).gen(
        argparse.Namespace(n_predict=n, draft_temp=None), seed=0)
    cfg.validate()
    return cfg


def _counters(pool) -> dict[str, tuple[int, int]]:
    """(llama_decode calls, tokens evaluated) of the pool's real contexts so far."""
    return {role: (st.ctx.n_decodes, st.ctx.n_evaluated)
            for role, st in (("target", pool.base.target), ("draft", pool.base.draft)) if st is not None}


def run_method(pool, spec: str, prompts: list[str], concurrent: int, n: int, shift: int = 0) -> dict:
    """C generations at once, slot i answering prompt (i + shift) mod C; `shift` > 0 runs on
    what an earlier call left in the stores (the rotated wave: each prompt lands on another slot)."""
    cfg = _cfg(spec, n)
    ran: dict[int, tuple[int, str]] = {}

    def one(i: int, n_predict: int | None = None) -> None:
        c = cfg if n_predict is None else replace(cfg, n_predict=n_predict)
        text = prompts[(i + shift) % concurrent % len(prompts)]  # shifted among the C answered
        with pool.active(i):
            done = list(pool.slots[i].generate([{"role": "user", "content": text}], c))[-1]
        if n_predict is None:
            ran[i] = (done.stats.n_tokens, done.stats.ran)

    if not shift:
        pool.forget_lookups()  # no suffix store holds an earlier method's answers
    # warm-up, and every slot's prompt evaluated and cached: the timed run is the decoding
    # rounds only, the same for every method (a method run later would otherwise find the
    # prompts cached by an earlier one)
    prime = [threading.Thread(target=one, args=(i, 1)) for i in range(concurrent)]
    for t in prime:
        t.start()
    for t in prime:
        t.join()
    before = _counters(pool)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrent)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = _counters(pool)
    tokens = sum(v[0] for v in ran.values())
    return {"method": spec + (" rotated" if shift else ""), "concurrent": concurrent, "wall_s": wall, "tokens": tokens,
            "aggregate_tok_per_s": tokens / wall, "ran": [ran[i][1] for i in sorted(ran)],
            "decodes": {k: {"calls": after[k][0] - before[k][0], "tokens": after[k][1] - before[k][1]} for k in after}}


def _cell(d: dict, role: str) -> str:
    if role not in d or not d[role]["calls"]:
        return f"{'-':>21}"
    return f"{d[role]['calls']:12d} {d[role]['tokens'] / d[role]['calls']:8.1f}"


def main(a: argparse.Namespace) -> int:
    concurrent = a.concurrent or a.np
    if not 1 <= concurrent <= a.np:
        raise ConfigError(f"--concurrent must be in 1..--np ({a.np}), got {concurrent}")
    for m in a.methods:
        _cfg(m, a.n_predict)  # a bad METHOD[+SPEC-TYPE][:L] is refused before the models load
    prompts = [p.text for p in load_prompts(None, a.kinds)]
    opts = SessionOptions(threads=a.threads, n_ctx=a.ctx * a.np, n_batch=512 * a.np)
    pool = open_pool(a.target, a.draft, opts, a.np)
    try:
        if any(m == "auto" for m in a.methods):
            pool.base.explain(_cfg("auto", a.n_predict))  # timed before the slots serve, as `serve -np` does
            pool.share_costs()
        rows = []
        for m in a.methods:
            print(f"bench slots: {m} ({concurrent} x {a.n_predict} tokens) ...", file=sys.stderr, flush=True)
            for shift in (0, 1) if a.rotate and "suffix" in _cfg(m, 1).kinds else (0,):
                rows.append(run_method(pool, m, prompts, concurrent, a.n_predict, shift))
                print(f"bench slots: {rows[-1]['method']}: {rows[-1]['aggregate_tok_per_s']:.1f} tok/s",
                      file=sys.stderr, flush=True)
    finally:
        pool.close()
    ar = next((r["aggregate_tok_per_s"] for r in rows if r["method"] == "ar"), None)
    print(f"bench slots: {concurrent} generations at once on {a.np} slots, {a.n_predict} tokens each")
    print(f"{'method':8} {'wall s':>7} {'agg t/s':>8} {'vs ar':>6}  {'target calls tok/call':>21}  "
          f"{'draft calls tok/call':>20}  ran")
    for r in rows:
        d = r["decodes"]
        vs = f"{r['aggregate_tok_per_s'] / ar:5.2f}x" if ar else "    -"
        print(f"{r['method']:8} {r['wall_s']:7.2f} {r['aggregate_tok_per_s']:8.1f} {vs:>6}  {_cell(d, 'target')}  "
              f"{_cell(d, 'draft')}   {'; '.join(sorted(set(r['ran'])))[:80]}")
    if a.json:
        write_json(a.json, {"machine": machine_info(a.threads), "args": vars(a) | {"func": None}, "results": rows})
    return 0
