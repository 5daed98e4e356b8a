"""Which llama.cpp column a bench's "vs llama.cpp" ratios are taken to, chosen without the
report's own noise.

Why not simply the fastest column of the run: on a set where llama.cpp's n-gram settings
find nothing to draft, they are its plain loop under other names. On the chat report half
(stop 56) ngram-mod (n_match 24) and ngram-map-k (12) drafted 0 tokens on every prompt, and
the fastest of four plain loops by median tok/s, `ngram-mod`, ran 1.09x localspec's AR where
`none` ran 1.03x: the maximum of four samples of one speed, not a better setting. Taking it
made auto 0.94x "llama.cpp's best" on a set where localspec's AR and llama.cpp's plain loop
measure equal (1.01x, 16 runs alternating). Two rules:

- a column that drafted nothing on any prompt is counted as `none` when `none` ran beside
  it (the plain loop it is); without `none` it stays, and the bench says it drafted nothing;
- `--peer-best TYPE` names the setting outright: pick it on the tuning half (the bench
  prints its choice there), report on the other, as every tuned choice is (docs/bench.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from localspec.bench.runner import Run, Spec
from localspec.errors import ConfigError

PLAIN = "none"  # llama.cpp's --spec-type for its loop without drafts


def drafted(results: Sequence[Run], label: str) -> int | None:
    """Tokens llama.cpp drafted over all prompts in column `label` (its log's count); None
    when a run's log gave no count (then nothing is concluded from it)."""
    counts = [r.extra.get("drafted") for r in results if r.label == label]
    if any(c is None for c in counts):
        return None
    return sum(int(c) for c in counts)


def best_peer(results: Sequence[Run], specs: Sequence[Spec], fixed: str | None = None) -> tuple[str, list[str]]:
    """The llama.cpp column to take ratios to, and the lines that say why (printed and saved).

    `specs`: the llama.cpp columns asked for; only those with results count. `fixed`: the
    --spec-type named by --peer-best (ConfigError when that column did not run)."""
    ran = [s for s in specs if any(r.label == s.label for r in results)]
    if not ran:
        return (specs[0].label if specs else ""), []
    if fixed is not None:
        hit = [s for s in ran if s.proposers == fixed]
        if not hit:
            raise ConfigError(f"--peer-best {fixed}: not among the llama.cpp settings that ran "
                              f"({', '.join(s.proposers for s in ran)}); add it to --peer-spec-types")
        return hit[0].label, [f"llama.cpp's column: {hit[0].label}, as --peer-best named it"]
    plain = next((s for s in ran if s.proposers == PLAIN), None)
    notes: list[str] = []
    candidates = []
    for s in ran:
        if s is not plain and drafted(results, s.label) == 0:
            if plain is not None:
                notes.append(f"{s.label} drafted nothing on any prompt: its plain loop, counted as "
                             f"{plain.label} (its own speed there is the machine's noise)")
                continue
            notes.append(f"{s.label} drafted nothing on any prompt: a plain loop under another name")
        candidates.append(s)

    def speed(s: Spec) -> float:
        return statistics.median(r.tok_per_s for r in results if r.label == s.label)

    best = max(candidates, key=speed)
    notes.append(f"llama.cpp's column: {best.label}, the fastest (median tok/s) of "
                 f"{', '.join(s.proposers for s in candidates)}")
    return best.label, notes
