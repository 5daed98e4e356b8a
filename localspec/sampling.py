"""Logits -> probabilities: temperature, top-k, min-p, top-p, greedy.

The SAME transform must be applied to draft and target rows, or speculative verification is
not lossless (the verifiers compare the two distributions). Rows come back SPARSE (token ids
+ probabilities over the kept support) because with the usual truncation a row keeps tens of
tokens out of ~150k: the engine then works on the union of supports, never on 600 KB rows.

Order of the filters (all keep "the m most likely tokens" for some m, so top-k and min-p
commute): scale by 1/T, keep the top-k, drop tokens below min_p * p_max, then keep the
smallest head whose mass reaches top_p, renormalise. T = 0 means greedy: a one-hot row at the
argmax (ties -> lowest id, as numpy's argmax).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec.config import SamplingConfig


@dataclass(frozen=True)
class SparseRow:
    """A probability row restricted to its support: ids ascending by -prob (most likely first)."""

    ids: np.ndarray  # int64
    probs: np.ndarray  # float64, sums to 1

    def prob_of(self, token: int) -> float:
        """P(token) under this row (0 outside the support)."""
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def dense(self, n_vocab: int) -> np.ndarray:
        """Full-vocabulary row (tests and small vocabularies only)."""
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs
        return out


def greedy_rows(logits: np.ndarray) -> np.ndarray:
    """Argmax per row of a (R, V) logits array (a numpy view is fine: nothing is copied)."""
    return np.argmax(logits, axis=-1)


def transform_row(logits: np.ndarray, cfg: SamplingConfig) -> SparseRow:
    """Apply the sampling transform to one row of logits (float32 view of length V)."""
    if cfg.greedy:
        tok = int(np.argmax(logits))
        return SparseRow(np.array([tok], dtype=np.int64), np.ones(1))
    inv_t = 1.0 / cfg.temp
    top = float(logits.max())
    # Candidate set: tokens that can survive min-p (cheap vectorised threshold, no sort of V).
    if cfg.min_p > 0.0:
        thresh = top + np.log(cfg.min_p) * cfg.temp
        ids = np.flatnonzero(logits >= thresh)
    else:
        ids = None
    if ids is None or (cfg.top_k > 0 and ids.size > cfg.top_k):
        pool = logits if ids is None else logits[ids]
        if cfg.top_k > 0 and pool.size > cfg.top_k:
            part = np.argpartition(-pool, cfg.top_k - 1)[: cfg.top_k]
            ids = part if ids is None else ids[part]
        elif ids is None:
            ids = np.arange(logits.shape[-1])
    vals = logits[ids].astype(np.float64) * inv_t
    order = np.argsort(-vals, kind="stable")
    ids, vals = ids[order], vals[order]
    p = np.exp(vals - vals[0])
    p /= p.sum()
    if cfg.min_p > 0.0:
        keep = int(np.count_nonzero(p >= cfg.min_p * p[0]))
        ids, p = ids[:keep], p[:keep]
        p = p / p.sum()
    if cfg.top_p < 1.0 and p.size > 1:
        csum = np.cumsum(p)
        keep = int(np.searchsorted(csum, cfg.top_p - 1e-12)) + 1
        ids, p = ids[:keep], p[:keep]
        p = p / p.sum()
    return SparseRow(ids.astype(np.int64), p)


def masked_row(logits: np.ndarray, cfg: SamplingConfig, allowed: np.ndarray, buf: np.ndarray) -> SparseRow:
    """The sampling transform of a row restricted to the `allowed` tokens (a grammar's mask):
    the disallowed logits become -inf in `buf` (a reused float32 row: the logits view is
    never written), then the same transform as transform_row. So the law is the one llama.cpp
    and vLLM sample under a grammar: the target's, masked first, then temperature and the
    truncations over what is left, renormalised.

    Where the grammar allows few tokens (most JSON positions: a few hundred of 152k) the
    transform runs on those logits alone and maps back: the same filters over the same
    values in the same id order, without touching the whole row twice."""
    ids = np.flatnonzero(allowed)
    if ids.size * 8 < logits.shape[-1]:
        sub = transform_row(logits[ids], cfg)
        row = SparseRow(ids[sub.ids], sub.probs)
    else:
        np.copyto(buf, logits)
        buf[~allowed] = -np.inf
        row = transform_row(buf, cfg)
    # without truncation (top-k 0, min-p 0, top-p 1) the transform keeps every id, the refused
    # ones at probability 0: drop them, or every verify row would span the whole vocabulary
    live = row.probs > 0.0
    return row if live.all() else SparseRow(row.ids[live], row.probs[live])


def transform_rows(logits: np.ndarray, cfg: SamplingConfig) -> list[SparseRow]:
    """Transform every row of a (R, V) logits array."""
    return [transform_row(row, cfg) for row in logits]


def sample_row(row: SparseRow, gen: np.random.Generator) -> int:
    """Draw one token from a sparse row."""
    if row.ids.size == 1:
        return int(row.ids[0])
    return int(row.ids[int(gen.choice(row.ids.size, p=row.probs))])
