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

Between two requests the user types: a warm request is sent `pause` seconds per character
typed since the one before (the typing simulation's keystroke interval, 150 ms by default),
after its predecessor's answer. A server may use that time (localspec evaluates the prompt
the suggestion's next word would bring: server/fim_prefetch.py); so each server takes a
hole's requests on its own, and the next server starts only when this one is idle again
(/slots: no prefetch running), in an order that turns with every hole (a drifting machine
drifts for all). `pause` 0 is the rhythm of stop 47-48's runs: no time between requests.
"""

from __future__ import annotations

import http.client
import json
import re
import time
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
            "predicted_ms": timings.get("predicted_ms", 0.0),
            "drafted": timings.get("draft_n", 0), "accepted": timings.get("draft_n_accepted", 0),
            "ran": got.get("localspec", {}).get("ran"), "content": content}


def answer_free(samples: list[dict]) -> list[float]:
    """Each request's latency less its server's decoding time (`predicted_ms`): what the
    client would have waited had the answer cost nothing -- the prompt, a wait for a
    prefetch, the HTTP round trip. Its p50 is a bound no drafter can go below: the FIM
    goal's 0.7x llama-server is out of reach wherever this alone is above it."""
    return [max(s["latency"] - s.get("predicted_ms", 0.0) / 1e3, 0.0) for s in samples]


def bound_cells(free_ms: float, best_ms: float) -> str:
    """The table's `no answer` p50 and its `bound` against llama-server's best p50 (both tables)."""
    bound = f"{free_ms / best_ms:.2f}x" if best_ms > 0 else "-"
    return f"{free_ms:>7.0f}ms {bound:>6}"


def wait_idle(port: int, timeout: float = 120.0) -> None:
    """Until no slot of a localspec server at `port` evaluates a guessed prompt (so that no
    server's background work overlaps another's requests)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            c.request("GET", "/slots")
            slots = json.loads(c.getresponse().read())
        finally:
            c.close()
        if not any(s.get("prefetching") for s in slots):
            return
        time.sleep(0.05)


def run_rhythm(servers: list, holes: list[Hole], words: int, n_predict: int, pause: float, post: Post) -> dict[int, Rhythm]:
    """Each hole's cold and warm requests, server by server (`servers`: bench fim's Live
    records), the order turned by one with every hole; a warm request `pause` s per typed
    character after the answer before it. A server that fails is marked skipped, why kept."""
    runs = {id(x): Rhythm(words, pause) for x in servers}
    for i, h in enumerate(holes):
        points = typed_points(h.middle, words)
        if not points:
            continue
        for x in servers[i % len(servers):] + servers[: i % len(servers)]:
            if x.row.skipped:
                continue
            try:
                before = 0
                for typed in [0, *points]:
                    time.sleep(pause * (typed - before))
                    runs[id(x)].ask(post, x.port, h, typed, n_predict)
                    before = typed
                if x.row.server.startswith("localspec"):
                    wait_idle(x.port)
            except (RuntimeError, OSError) as e:
                x.row.skipped = str(e)
    return runs


class Rhythm:
    """One server's rhythm: each hole asked at the cursor (`cold`), then after each typed word."""

    def __init__(self, words: int, pause: float = 0.0) -> None:
        self.words = words
        self.pause = pause
        self.cold: list[dict] = []
        self.warm: list[dict] = []

    def ask(self, post: Post, port: int, hole: Hole, typed: int, n_predict: int) -> None:
        """The hole's request with `typed` characters of its middle typed after the cursor."""
        got, latency = post(port, hole.body(n_predict, typed))
        (self.warm if typed else self.cold).append(sample(hole, typed, got, latency))

    def summary(self) -> dict:
        lat = [s["latency"] for s in self.warm]
        return {"holes": len(self.cold), "requests": len(self.warm), "words": self.words, "pause_ms_per_char": self.pause * 1e3,
                "warm_p50_ms": _pct(lat, 0.5) * 1e3, "warm_p95_ms": _pct(lat, 0.95) * 1e3,
                "cold_p50_ms": _pct([s["latency"] for s in self.cold], 0.5) * 1e3,
                "free_p50_ms": _pct(answer_free(self.warm), 0.5) * 1e3,
                "cold_free_p50_ms": _pct(answer_free(self.cold), 0.5) * 1e3,
                "exact": sum(s["exact"] for s in self.warm) / len(self.warm) if self.warm else 0.0,
                "prompt_share": (sum(s["prompt_ms"] for s in self.warm) / 1e3 / sum(lat)) if lat and sum(lat) > 0 else 0.0,
                "cold": self.cold, "warm": self.warm}


def table_lines(rows: list[dict]) -> list[str]:
    """The rhythm's lines of bench fim's table: warm latency per server, vs llama-server's
    best; `no answer`: the p50 with each answer's decoding taken out (answer_free), and
    that bound against the same best."""
    have = [r for r in rows if not r["skipped"] and r.get("rhythm") and r["rhythm"]["requests"]]
    if not have:
        return []
    best = min((r["rhythm"]["warm_p50_ms"] for r in have if r["server"].startswith("llama-server")), default=0.0)
    out = ["", f"editor rhythm: each hole asked at the cursor, then after each of its first {have[0]['rhythm']['words']} "
               "typed words (warm requests)",
           f"{'server':26} {'warm':>5} {'p50':>8} {'p95':>8} {'exact':>6} {'prompt':>7} {'cold p50':>9} {'vs best srv':>11}"
           f" {'no answer':>9} {'bound':>6}"]
    for r in have:
        y = r["rhythm"]
        x = f"{y['warm_p50_ms'] / best:.2f}x" if best > 0 else "-"
        out.append(f"{r['server']:26} {y['requests']:>5} {y['warm_p50_ms']:>6.0f}ms {y['warm_p95_ms']:>6.0f}ms "
                   f"{y['exact']:>6.0%} {y['prompt_share']:>7.0%} {y['cold_p50_ms']:>7.0f}ms {x:>11} "
                   f"{bound_cells(y.get('free_p50_ms', 0.0), best)}")
    return out
