"""bench fim's editor rhythm: the cursor's first request, then the same hole as the user types.

Why a second measure beside the holes: an editor does not ask once per hole. It asks at the
cursor, shows the suggestion, and asks again whenever the user types on past it (llama.vscode
and Continue-style plugins ask on each pause). Those follow-up requests share everything
before the cursor with the one before, so a server that keeps the prompt's KV (llama-server's
`cache_prompt`, localspec's slot reuse) re-evaluates only the typed characters and what
follows the cursor; and what the user types is usually the suggestion they were shown, so
the rest of the answer is in the earlier completion -- text a drafter that learns across
requests (localspec's suffix store) can propose and a drafter that sees one request only
cannot. Each hole is asked at the cursor (`cold`, not in the figures), then again after each
of the first `words` words of its middle is typed (`warm`): latency p50 / p95 of the warm
requests as the client sees them, and whether each answer is exactly the rest of the middle.
Requests are sequential (the user paused); superseding is the typing simulation's job.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from localspec.bench.fim_holes import Hole
from localspec.bench.serve import _pct

Post = Callable[[int, dict], tuple[dict, float]]


def typed_points(middle: str, words: int) -> list[int]:
    """Character offsets after each of the first `words` words of `middle` (with the space
    typed after it), short of the whole middle: where the user pauses and the editor asks."""
    end = len(middle.rstrip())
    points = [m.end() for m in re.finditer(r"\S+\s*", middle) if m.end() < end]
    return points[:words]


def sample(hole: Hole, typed: int, got: dict, latency: float) -> dict:
    """One request's record: who answered what, how fast, and whether it is the rest of the
    middle (typed 0: the whole middle, as Hole.exact has it)."""
    content = got.get("content", "")
    timings = got.get("timings", {})
    return {"id": hole.id, "kind": hole.kind, "typed": typed, "latency": latency,
            "tokens": got.get("tokens_predicted", 0), "exact": content.rstrip() == hole.middle[typed:].rstrip(),
            "prompt_ms": timings.get("prompt_ms", 0.0), "prompt_n": timings.get("prompt_n", 0),
            "drafted": timings.get("draft_n", 0), "accepted": timings.get("draft_n_accepted", 0),
            "ran": got.get("localspec", {}).get("ran"), "content": content}


class Rhythm:
    """One server's rhythm: each hole asked at the cursor (`cold`), then after each typed word."""

    def __init__(self, words: int) -> None:
        self.words = words
        self.cold: list[dict] = []
        self.warm: list[dict] = []

    def ask(self, post: Post, port: int, hole: Hole, typed: int, n_predict: int) -> None:
        """The hole's request with `typed` characters of its middle typed after the cursor."""
        got, latency = post(port, hole.body(n_predict, typed))
        (self.warm if typed else self.cold).append(sample(hole, typed, got, latency))

    def summary(self) -> dict:
        lat = [s["latency"] for s in self.warm]
        return {"holes": len(self.cold), "requests": len(self.warm), "words": self.words,
                "warm_p50_ms": _pct(lat, 0.5) * 1e3, "warm_p95_ms": _pct(lat, 0.95) * 1e3,
                "cold_p50_ms": _pct([s["latency"] for s in self.cold], 0.5) * 1e3,
                "exact": sum(s["exact"] for s in self.warm) / len(self.warm) if self.warm else 0.0,
                "prompt_share": (sum(s["prompt_ms"] for s in self.warm) / 1e3 / sum(lat)) if lat and sum(lat) > 0 else 0.0,
                "cold": self.cold, "warm": self.warm}


def table_lines(rows: list[dict]) -> list[str]:
    """The rhythm's lines of bench fim's table: warm latency per server, vs llama-server's best."""
    have = [r for r in rows if not r["skipped"] and r.get("rhythm") and r["rhythm"]["requests"]]
    if not have:
        return []
    best = min((r["rhythm"]["warm_p50_ms"] for r in have if r["server"].startswith("llama-server")), default=0.0)
    out = ["", f"editor rhythm: each hole asked at the cursor, then after each of its first {have[0]['rhythm']['words']} "
               "typed words (warm requests)",
           f"{'server':26} {'warm':>5} {'p50':>8} {'p95':>8} {'exact':>6} {'prompt':>7} {'cold p50':>9} {'vs best srv':>11}"]
    for r in have:
        y = r["rhythm"]
        x = f"{y['warm_p50_ms'] / best:.2f}x" if best > 0 else "-"
        out.append(f"{r['server']:26} {y['requests']:>5} {y['warm_p50_ms']:>6.0f}ms {y['warm_p95_ms']:>6.0f}ms "
                   f"{y['exact']:>6.0%} {y['prompt_share']:>7.0%} {y['cold_p50_ms']:>7.0f}ms {x:>11}")
    return out
