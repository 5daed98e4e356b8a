"""`localspec bench constraint`: the Python cost of a grammar per iteration, beside a target step.

For each prompt of the structured set (or the built-in one), the target writes its greedy
answer under a JSON schema; that answer is then replayed in iterations of L right drafts and
the grammar's work is timed (tools.constraint_costs: fit, the verify rows read at their
nodes' grammar states, commit), at T = 0 and at T = 0.7, beside what reading the same rows
without a grammar costs (an argmax or the sampling transform per row): median, p99, max per
iteration, and the median extra. The goal (issue 39): at most 1 ms
median at L = 16.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from localspec import tools
from localspec.config import GenConfig, SamplingConfig
from localspec.constrain import ConstraintSpec
from localspec.loading import open_session
from localspec.session import SessionOptions

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                "required": ["street", "city"]},
    "status": {"enum": ["active", "inactive", "pending"]}},
    "required": ["name", "age", "email", "tags", "address", "status"]}
PROMPT = ("Extract the person as JSON: Maria Lopez, 34, maria.lopez@example.org, lives at 12 Harbour Road "
          "in Porto, tags: engineer, climber, reader; her account is active.")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--target", default="qwen2.5-coder-1.5b", help="target (registry name or path)")
    p.add_argument("-L", "--draft-len", type=int, default=16, help="drafted tokens per iteration")
    p.add_argument("-n", "--n-predict", type=int, default=160)
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("--json", action="store_true", help="one JSON line instead of the table")


def _row(name: str, secs: tuple[list[float], list[float]]) -> dict:
    ms, base = np.array(secs[0]) * 1e3, np.array(secs[1]) * 1e3
    return {"sampling": name, "iterations": len(ms), "median_ms": float(np.median(ms)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()),
            "unconstrained_median_ms": float(np.median(base)), "extra_median_ms": float(np.median(ms - base))}


def main(a: argparse.Namespace) -> int:
    spec = ConstraintSpec("json_schema", json.dumps(SCHEMA), origin="bench constraint")
    sess = open_session(a.target, None, SessionOptions(threads=a.threads))
    try:
        cfg = GenConfig(method="ar", n_predict=a.n_predict, sampling=SamplingConfig(temp=0.0), constraint=spec)
        list(sess.generate([{"role": "user", "content": PROMPT}], cfg))
        prompt, answer = sess.last_prompt_tokens, sess.last_tokens
        rows = [_row(name, tools.constraint_costs(sess, spec, prompt, answer, a.draft_len, s))
                for name, s in (("greedy", SamplingConfig(temp=0.0)),
                                ("T=0.7", SamplingConfig(temp=0.7, top_k=40, top_p=0.95, min_p=0.05)))]
    finally:
        sess.close()
    out = {"target": a.target, "L": a.draft_len, "answer_tokens": len(answer), "rows": rows}
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"grammar work per iteration, {a.target}, L = {a.draft_len}, {len(answer)} answer tokens")
    print(f"{'sampling':<10}{'iterations':>11}{'median ms':>11}{'p99 ms':>9}{'max ms':>9}"
          f"{'unconstrained':>15}{'extra':>8}")
    for r in rows:
        print(f"{r['sampling']:<10}{r['iterations']:>11}{r['median_ms']:>11.3f}{r['p99_ms']:>9.3f}{r['max_ms']:>9.3f}"
              f"{r['unconstrained_median_ms']:>15.3f}{r['extra_median_ms']:>8.3f}")
    return 0
