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


def log_normalizer(row: np.ndarray) -> float:
    """log(sum(exp(row))) of one float32 logits row, stable (max shifted out) and summed in
    float64 so that 150k terms lose nothing measurable."""
    m = float(row.max())
    return m + math.log(float(np.exp(row - m).sum(dtype=np.float64)))


def row_logprob(model: Model, row: np.ndarray, token: int, n_top: int) -> TokenLogprob:
    """The entry of `token` read from the row that predicted it, with the n_top most likely
    alternatives (ties: lower id first)."""
    lse = log_normalizer(row)
    top: tuple[tuple[int, bytes, float], ...] = ()
    if n_top > 0:
        n = min(n_top, row.shape[0])
        ids = np.argpartition(row, -n)[-n:]
        ids = ids[np.lexsort((ids, -row[ids]))]  # by logit, descending; ties by id
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
