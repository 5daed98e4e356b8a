"""What a fresh session believes before its first verification: acceptance priors shipped as data.

Without them every session's first turn learns from nothing: the lookup gate bets on 0.5
(plus an exploration bonus) for every matched n-gram length, and the draft model on 0.7,
whatever the pair. A one-shot `localspec run` (one turn, 100 tokens) never gets past that.
`localspec bench priors` fits both on the tuning halves of the bench's prompt sets (never
the report halves) and writes localspec/data/priors.json:

- `lookup`: per (proposer, matched length, origin) -- the keys auto's gate learns per
  (costmodel/lookup.gate_key; "ngram:8:prompt" in the file) -- the tokens
  accepted and positions reached when a lookup drafted at every position where it had a match
  (the target's greedy answers replayed: at T = 0 a drafted token is accepted iff it is the
  answer's), pooled over the prompt kinds;
- `draft`: per (target file, draft file), the greedy draft's per-token agreement with the
  target's greedy answers (what sd's acceptance is at T = 0);
- `draft_bins`: the same agreement per bin of the draft's confidence (its top probability),
  [accepted, positions] per bin: the calibration the draft-length rule starts from.

A prior is evidence worth PRIOR_WEIGHT verifications: a session's own first few
verifications already outweigh it. `use(False)` turns them off for the whole process (new
estimates start uninformed); a session forgets into either state with
Session.forget_learning(priors=...) (the bench's `auto-cold` column).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Hashable, Sequence
from importlib import resources

PRIOR_WEIGHT = 6.0  # positions of evidence a shipped lookup prior is worth (live ones add to it)
MIN_EVIDENCE = 20.0  # a key fitted on fewer reached positions keeps the uninformed prior
DRAFT_PRIOR_WEIGHT = 8.0  # verifications a shipped draft acceptance is worth (acceptance.py's weight)
_FILE = "priors.json"
_PROMPT = "prompt"  # decode/drafters/base.PROMPT: a match in the text the turn was given
LONG = "long"  # a gate key's mark for a match inside a long copy (costmodel/lookup.gate_key)
_enabled = True


def use(enabled: bool) -> None:
    """Start new estimates from the shipped priors (True, the default) or from the
    uninformed ones, process-wide (what every session did before stop 46)."""
    global _enabled
    _enabled = enabled


def enabled() -> bool:
    return _enabled


@functools.cache
def shipped() -> dict:
    """localspec/data/priors.json ({} when absent or unreadable: the uninformed priors then)."""
    try:
        text = resources.files("localspec").joinpath("data", _FILE).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def key_text(key: Hashable) -> str:
    """A gate key ("ngram", 5) / ("ngram", 5, "prompt") / ("ngram", 8, "prompt", "long") as the
    file spells it: "ngram:5" / "ngram:5:prompt" / "ngram:8:prompt:long"."""
    if isinstance(key, tuple) and 2 <= len(key) <= 4:
        return ":".join(str(k) for k in key)
    return str(key)


def parse_key(text: str) -> tuple | None:
    """key_text's inverse; None for a malformed entry (skipped)."""
    parts = text.split(":")
    if not 2 <= len(parts) <= 4 or not parts[0] or not parts[1].isdigit() or not all(parts[2:]):
        return None
    return (parts[0], int(parts[1]), *parts[2:])


@functools.cache
def _lookup_table() -> dict[Hashable, tuple[float, float]]:
    """{gate key: (alpha, positions reached)} of the shipped fit, thin keys left out."""
    out: dict[Hashable, tuple[float, float]] = {}
    for text, (acc, reached) in (shipped().get("lookup") or {}).items():
        key = parse_key(text)
        if key is None or reached < MIN_EVIDENCE:
            continue
        out[key] = (min(max(acc / reached, 0.0), 1.0), float(reached))
    # a match in the client's prediction (decode/drafters/prediction.py) starts where a prompt
    # match of that length does (text the client gave), until the prediction has priors of its own
    for key, row in list(out.items()):
        if key[0] == "ngram" and key[2:3] in ((), (_PROMPT,)) and key[3:] in ((), (LONG,)):
            out.setdefault(("prediction", key[1], *key[3:]), row)
    return out


def lookup_priors() -> dict[Hashable, tuple[float, float]]:
    """{gate key: (pseudo-accepted, pseudo-trials)} scaled to PRIOR_WEIGHT trials; {} when off."""
    if not _enabled:
        return {}
    return {key: (alpha * PRIOR_WEIGHT, PRIOR_WEIGHT) for key, (alpha, _) in _lookup_table().items()}


def lookup_evidence() -> dict[Hashable, float]:
    """{gate key: positions the shipped prior was fitted on}; {} when off. The gate's
    exploration bonus shrinks with them: a prior fitted on 873 positions is not a guess,
    though it weighs only PRIOR_WEIGHT against the session's own evidence."""
    if not _enabled:
        return {}
    return {key: reached for key, (_, reached) in _lookup_table().items()}


def draft_alpha(target: str, draft: str, greedy: bool) -> float | None:
    """The shipped acceptance of this (target file, draft file) pair at T = 0, or None."""
    if not _enabled or not greedy:
        return None
    a = (shipped().get("draft") or {}).get(f"{target}--{draft}")
    return float(a) if isinstance(a, (int, float)) and 0.0 <= a <= 1.0 else None


def draft_bins(target: str, draft: str, greedy: bool) -> list[float | None] | None:
    """The shipped acceptance calibration of this pair at T = 0: per draft-confidence bin
    (acceptance.N_BINS), how often the greedy draft's token was the target's, or None. A bin
    fitted on fewer than BIN_MIN positions is None: it keeps acceptance.py's default."""
    if not _enabled or not greedy:
        return None
    rows = (shipped().get("draft_bins") or {}).get(f"{target}--{draft}")
    if not isinstance(rows, list) or not rows:
        return None
    out: list[float | None] = []
    for row in rows:
        try:
            acc, n = float(row[0]), float(row[1])
        except (TypeError, ValueError, IndexError):
            return None
        out.append(acc / n if n >= BIN_MIN else None)
    return out


BIN_MIN = 20.0  # positions a shipped calibration bin needs before it replaces the bin's confidence


def right_prefix(draft: Sequence[int], rest: Sequence[int]) -> int:
    """How many leading drafted tokens the answer goes on with (accepted at T = 0)."""
    a = 0
    while a < len(draft) and a < len(rest) and draft[a] == rest[a]:
        a += 1
    return a


def replay_lookups(prompt: list[int], gen: list[int], index, regions, l_max: int,
                   key: Callable[[str, int, str, int], tuple], source: str = "ngram") -> dict[str, list[float]]:
    """{"source:matched:origin": [accepted, reached]} of a lookup that drafts (up to l_max tokens)
    wherever the history has a match, along a greedy answer: after a draft the walk moves
    past its accepted tokens and the target's own one, as a verification does; reached counts
    as LookupGate.update does (the accepted tokens and the rejected one). `regions`
    (decode/drafters/lookup.Regions of the prompt) names where each match continues; `key`:
    costmodel/lookup.gate_key (proposer, match length, origin, agreement run -> the gate's key),
    so the counts are keyed as the live gate learns."""
    out: dict[str, list[float]] = {}
    i = 1  # gen[0] comes from the prompt's own decode
    while i < len(gen):
        index.extend(prompt + gen[:i])
        toks, matched = index.continuation(l_max)
        if not toks:
            i += 1
            continue
        tau = right_prefix(toks, gen[i:])
        row = out.setdefault(key_text(key(source, matched, regions.origin(index.at), index.run)), [0.0, 0.0])
        row[0] += tau
        row[1] += min(tau + 1, len(toks))
        i += tau + 1
    return out
