"""PARSE segmenter and decision rule: where a drafted answer may be cut, and which cut wins.

Pure functions over token pieces and scores (no model, no numpy state), so the rules that
decide how much of a draft survives are testable on hand-made streams.

Why these boundaries: a judge asked "is the answer correct so far?" (or a likelihood score
summed over a segment) is only meaningful at points where a reader would pause: the end of
a line of code, the end of a sentence, a blank line between reasoning steps. Cutting in the
middle of an identifier would make the target continue a half-token word.
"""

from __future__ import annotations

from collections.abc import Sequence

BLANK_LINE = 3
LINE_END = 2
SENTENCE_END = 1
_SENTENCE_CHARS = (".", "!", "?")


def boundary_kinds(pieces: Sequence[bytes | str]) -> list[int]:
    """Strength of the boundary right after each token (0 = none).

    Token j ends a line when its text contains a newline (a blank line when it contains two,
    or when the previous token also ended with one); it ends a sentence when its text ends
    with . ! or ? and the next token starts with whitespace (so `x.append` is not a cut).
    """
    texts = [p.decode("utf-8", "replace") if isinstance(p, bytes) else p for p in pieces]
    kinds = [0] * len(texts)
    for j, s in enumerate(texts):
        if "\n" in s:
            prev_nl = j > 0 and texts[j - 1].rstrip(" \t").endswith("\n")
            blank = s.count("\n") >= 2 or (prev_nl and s.lstrip(" \t").startswith("\n"))
            kinds[j] = BLANK_LINE if blank else LINE_END
        elif s.rstrip().endswith(_SENTENCE_CHARS) and s.rstrip() == s:
            nxt = texts[j + 1] if j + 1 < len(texts) else ""
            if nxt[:1].isspace():
                kinds[j] = SENTENCE_END
    return kinds


def boundaries(pieces: Sequence[bytes | str]) -> list[int]:
    """Prefix lengths (in tokens) that end at a boundary: j + 1 for every boundary token j."""
    return [j + 1 for j, k in enumerate(boundary_kinds(pieces)) if k]


def choose_cuts(bounds: Sequence[int], n_tokens: int, max_cuts: int, min_seg: int) -> list[int]:
    """At most `max_cuts` prefix lengths, increasing, the last always `n_tokens`.

    Candidates closer than `min_seg` tokens to the previous kept cut, to the start, or to the
    end of the answer are dropped (a tiny segment is not worth a judge copy); among the rest,
    the cuts nearest to evenly spaced token positions k*T/max_cuts are kept, so N cuts spread
    over the answer rather than clustering where lines are short.
    """
    if n_tokens <= 0:
        return []
    if max_cuts <= 1:
        return [n_tokens]
    min_seg = max(1, min_seg)
    spaced: list[int] = []
    last = 0
    for b in sorted(set(bounds)):
        if b - last >= min_seg and n_tokens - b >= min_seg:
            spaced.append(b)
            last = b
    want = max_cuts - 1
    if len(spaced) > want:
        chosen: list[int] = []
        used: set[int] = set()
        for k in range(1, want + 1):
            goal = k * n_tokens / max_cuts
            best = min((c for c in spaced if c not in used), key=lambda c: (abs(c - goal), c))
            used.add(best)
            chosen.append(best)
        spaced = sorted(chosen)
    return spaced + [n_tokens]


def decide(scores: Sequence[float], threshold: float) -> int:
    """Index of the last valid cut, or -1 when none is valid.

    The whole answer (last score) judged valid is accepted outright, as in the paper: the
    prefix verdicts only matter once the whole was rejected. Otherwise validity of prefixes
    is monotone (a wrong prefix cannot become right by adding text), so the answer is cut
    before the FIRST prefix score below the threshold even when a later, longer prefix
    scored higher: that later score is the judge's noise, not evidence.
    """
    if scores and scores[-1] >= threshold:
        return len(scores) - 1
    for i, s in enumerate(scores):
        if s < threshold:
            return i - 1
    return len(scores) - 1


def t_star(cuts: Sequence[int], scores: Sequence[float], threshold: float) -> int:
    """Length of the kept prefix: the cut before the first score below threshold (0 if none)."""
    i = decide(scores, threshold)
    return cuts[i] if i >= 0 else 0
