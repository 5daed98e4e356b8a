"""Target and draft rows -> a verifier's decision: the one place p and q are built.

Every lossless step goes through `verify_rows`: the speculative loop's K-draft blocks and
PARSE's free verification of a rejected tail. Rows arrive sparse (the sampling transform
keeps a few hundred tokens of Qwen's 151,936), so p and q are built over the sorted union
of their supports and the verifier runs on a few hundred columns instead of the whole
vocabulary; the decision's token is mapped back to a vocabulary id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from localspec.sampling import SparseRow
from localspec.verify import VERIFIERS, Decision, NumpyRNG

PAD = -1  # draft filler after a draft that ended early (verified as a token p never emits)


def verify_rows(
    method: str,
    rng: NumpyRNG,
    p_rows: Sequence[Sequence[SparseRow]],
    q_rows: Sequence[Sequence[SparseRow]],
    x: np.ndarray,
) -> Decision:
    """Decide on K drafts: x (K, L) tokens (PAD after a draft that ended early), q_rows[k]
    the len_k draft rows they were drawn from, p_rows[k] the len_k + 1 target rows along
    draft k (the last one is the bonus row).

    A draft shorter than L is padded with one extra column, a token the target never
    emits: q = 1 on it, p = 0, so the verifier rejects it and never emits it; the target
    rows after the padding are never reached (uniform filler, as in the enumeration that
    proves this exact: tests/test_verify_exact.py).
    """
    K, L = x.shape
    lens = [len(q) for q in q_rows]
    padded = min(lens) < L
    vocab = np.unique(np.concatenate([r.ids for rows in p_rows for r in rows]
                                     + [r.ids for rows in q_rows for r in rows] + [x[x != PAD].ravel()]))
    V = vocab.size
    W = V + 1 if padded else V  # column V: the padding token
    p = np.zeros((K, L + 1, W))
    q = np.zeros((K, L, W))
    for k in range(K):
        for i, row in enumerate(p_rows[k]):
            p[k, i, np.searchsorted(vocab, row.ids)] = row.probs
        for i, row in enumerate(q_rows[k]):
            q[k, i, np.searchsorted(vocab, row.ids)] = row.probs
        if lens[k] < L:
            p[k, lens[k] + 1 :, :V] = 1.0 / V
            q[k, lens[k] :, V] = 1.0
    xc = np.where(x == PAD, V, np.searchsorted(vocab, np.where(x == PAD, vocab[0], x)))
    d = VERIFIERS[method](rng, p, q, xc)
    if d.token >= V or d.tau > lens[d.k]:
        raise AssertionError(f"verifier {method} accepted the padding token (tau={d.tau}, token={d.token})")
    return replace(d, token=int(vocab[d.token]))


def one_hot(token: int) -> SparseRow:
    """The greedy target's row: all mass on its argmax."""
    return SparseRow(np.array([token], dtype=np.int64), np.ones(1))
