"""The target's log-probabilities of tokens, read from logits rows the loops already have.

Every emitted token was chosen from a target row that some decode already computed (AR's
one row; the verify pass's row before each accepted draft token and before the bonus or
correction), so asking for log-probabilities costs no decode: one log-softmax over the
vocabulary per token (~0.3 ms on 150k entries) and, for N alternatives, one partial sort.
Only done when GenConfig asks; rows are numpy views of llama.cpp's buffer, read before the
next decode overwrites them, and nothing of them is kept.

The distribution is the raw target's (before temperature, top-k/p, min-p and a grammar's
mask), vLLM's default "raw logprobs": the same numbers whatever the sampling settings or the
method, so a speculative run reports what plain decoding would (docs/server.md#logprobs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from localspec.backend import Model
from localspec.events import TokenLogprob


def log_normalizer(row: np.ndarray, top: float | None = None) -> float:
    """log(sum(exp(row))) of one float32 logits row (`top`: its max, when known), stable (the
    max shifted out) and summed in float64 so that 150k terms lose nothing measurable."""
    m = float(row.max()) if top is None else top
    return m + math.log(float(np.exp(row - m).sum(dtype=np.float64)))


def top_ids(row: np.ndarray, n: int, top: float) -> np.ndarray:
    """The n largest entries' ids, largest first (ties: lower id first).

    A partial sort of the whole row costs ~2 ms on 150k entries; the top few lie within a
    few logits of the max, so candidates above a threshold are found in one vectorised pass
    (~0.1 ms) and only they are sorted; the threshold widens until n are in."""
    width = 8.0
    while True:
        ids = np.flatnonzero(row >= top - width)
        if ids.size >= n or width > 1e6:
            break
        width *= 2
    if ids.size < n:  # fewer than n finite entries above -1e6: take the whole row
        ids = np.arange(row.shape[0])
    if ids.size > n:  # those at least the n-th largest (all of a tie at the boundary)
        vals = row[ids]
        ids = ids[vals >= np.partition(vals, -n)[-n]]
    return ids[np.lexsort((ids, -row[ids]))][:n]


def row_logprob(model: Model, row: np.ndarray, token: int, n_top: int) -> TokenLogprob:
    """The entry of `token` read from the row that predicted it, with the n_top most likely
    alternatives (ties: lower id first)."""
    m = float(row.max())
    lse = log_normalizer(row, m)
    top: tuple[tuple[int, bytes, float], ...] = ()
    if n_top > 0:
        ids = top_ids(row, min(n_top, row.shape[0]), m)
        top = tuple((int(t), model.piece(int(t)), float(row[t]) - lse) for t in ids)
    return TokenLogprob(int(token), model.piece(int(token)), float(row[token]) - lse, top)


def span_logprobs(model: Model, logits: np.ndarray, rows: Sequence[int], tokens: Sequence[int],
                  n_top: int) -> tuple[TokenLogprob, ...]:
    """Entries of tokens[i] read from output row rows[i] of `logits` (the last decode's
    (n_outputs, V) view), one row at a time: no (n, V) copy."""
    return tuple(row_logprob(model, logits[r], t, n_top) for r, t in zip(rows, tokens, strict=True))


def first_token(model: Model, token: int) -> TokenLogprob:
    """A prompt's first token: nothing predicts it (logprob None, no alternatives)."""
    return TokenLogprob(int(token), model.piece(int(token)), None)
