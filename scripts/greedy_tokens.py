"""Greedy tokens of every method x --spec-type on the shipped speed prompts (SmolLM2 pair: target
Q4_1, its Q4_0 draft), written as JSON: run it from two checkouts and compare, to show a refactor
changed no output token.

    python scripts/greedy_tokens.py OUT.json [--tree CHECKOUT]     # default: this checkout
    python -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); print(sum(a[k]==b[k] for k in a), len(a))" A.json B.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SETTINGS = [("ar", 1, None), ("sd", 1, None), ("gbv", 1, None), ("spectr", 2, None), ("mdbv", 2, None),
            ("sd", 1, ("ngram",)), ("gbv", 1, ("suffix",)), ("sd", 1, ("ngram", "draft")),
            ("sd", 1, ("ngram+draft",)), ("mdbv", 2, ("ngram+draft",)), ("sd", 1, ("suffix+draft",)),
            ("parse", 1, None)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]))
    p.add_argument("-n", type=int, default=64)
    a = p.parse_args()
    sys.path.insert(0, a.tree)  # that checkout's localspec, not the installed one
    from localspec.backend import Model
    from localspec.config import GenConfig, SamplingConfig
    from localspec.models import resolve_model
    from localspec.runtime import RuntimeSession
    from localspec.session import SessionOptions

    s = RuntimeSession(Model(str(resolve_model("smollm2-135m"))), Model(str(resolve_model("smollm2-135m-q4_0"))),
                       SessionOptions(n_ctx=4096, threads=1))
    rows = [json.loads(line) for line in open(Path(a.tree) / "localspec/bench/prompts/speed.jsonl")]
    out = {}
    for r in rows:
        for m, K, st in SETTINGS:
            cfg = GenConfig(method=m, K=K, L=5, n_predict=a.n, sampling=SamplingConfig(temp=0.0), spec_type=st)
            s.reset()
            list(s.generate([{"role": "user", "content": r["prompt"]}], cfg))
            out[f"{r['id']}|{m}|K{K}|{st}"] = s.last_tokens
    Path(a.out).write_text(json.dumps(out))
    print(f"{len(out)} runs -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
