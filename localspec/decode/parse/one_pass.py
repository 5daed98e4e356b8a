"""PARSE's target pass: the answer and N judge-suffix copies in ONE llama_decode.

The paper's custom attention mask is built from sequence ids (docs/design.md#one-decode): answer token j
carries MAIN plus the id of every copy whose cut is > j; copy i's suffix tokens carry id i
only, at positions after its cut. llama.cpp lets a token attend to cells that share one of
its sequence ids at positions <= its own, so copy i sees prompt + answer[:c_i] + itself and
nothing else, and every answer token is evaluated once for all copies.

Everything a decision needs is extracted from the logits right after the decode (views are
only valid until the next one): per-position argmax and gaps for the likelihood judge and
for the free token-level verification of the rejected tail, and one short yes/no read-out
per copy. No full 600 KB row is copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from localspec.config import SamplingConfig
from localspec.decode.state import MAIN, KVState
from localspec.sampling import SparseRow, transform_row


@dataclass
class Copy:
    """One judge-suffix copy: it sees answer[:cut] then `suffix` (seq id = index + 1)."""

    cut: int
    suffix: list[int]


@dataclass
class AnswerRows:
    """What the pass learned about the answer positions (row j predicts answer[j]; row T is
    the bonus row after the whole answer)."""

    argmax: np.ndarray  # (T+1,) int64
    gaps: np.ndarray  # (T,) float64: logit(argmax) - logit(token) = log p(argmax) - log p(token)
    nll: np.ndarray | None = None  # (T,) -log p(token), when asked for
    rows: list[SparseRow] | None = None  # transformed rows (T+1), only when sampling (temp > 0)
    entropy: np.ndarray | None = None  # (T,) target entropy in nats (calibration only)


@dataclass
class PassResult:
    """Outcome of the judge pass(es) of one round."""

    answer: AnswerRows
    copy_logits: dict[int, np.ndarray] = field(default_factory=dict)  # copy index -> reduced row
    n_decodes: int = 0


def lse(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """log-sum-exp in float64 of a float32 array, vectorised over rows (no Python loop)."""
    m = x.max(axis=axis, keepdims=True)
    out = np.log(np.exp(x - m, dtype=np.float64).sum(axis=axis, keepdims=True)) + m
    return np.squeeze(out, axis=axis)


def answer_features(
    logits: np.ndarray, answer: Sequence[int], *, want_nll: bool, sampling: SamplingConfig | None,
    want_entropy: bool = False,
) -> AnswerRows:
    """Per-position target read-outs from the (T+1, V) rows predicting answer[0..T-1] + bonus.

    The gap needs only each row's max and the token's logit (the log-normaliser cancels);
    nll needs one vectorised logsumexp over the rows, computed only when a judge uses it.
    """
    T = len(answer)
    amax = np.argmax(logits, axis=1)
    idx = np.arange(T)
    top = logits[np.arange(T + 1), amax].astype(np.float64)
    tok = logits[idx, np.asarray(answer, dtype=np.int64)].astype(np.float64)
    gaps = top[:T] - tok
    nll = ent = None
    if (want_nll or want_entropy) and T:
        z = lse(logits[:T])
        nll = z - tok
        if want_entropy:
            p = np.exp(logits[:T] - z[:, None])
            ent = z - (p * logits[:T]).sum(axis=1)
    rows = None
    if sampling is not None and not sampling.greedy:
        rows = [transform_row(logits[j], sampling) for j in range(T + 1)]
    return AnswerRows(amax.astype(np.int64), gaps, nll, rows, ent)


def _copy_ids(copies: Sequence[Copy], j: int) -> list[int]:
    return [i + 1 for i, c in enumerate(copies) if c.cut > j]


def judge_pass(
    tgt: KVState,
    answer: Sequence[int],
    copies: Sequence[Copy],
    reduce_ids: np.ndarray,
    *,
    first_copies: Sequence[int] | None = None,
    want_nll: bool = False,
    want_entropy: bool = False,
    sampling: SamplingConfig | None = None,
) -> PassResult:
    """Evaluate tgt.pending + answer (+ suffix copies) and read out what the judges need.

    `reduce_ids`: vocabulary ids whose logits are kept from each copy's last row (the
    yes/no variants). `first_copies`: two-stage mode, only these copies ride with the answer;
    the caller runs `judge_copies` for the rest if the first verdict is not enough. The
    answer stays in MAIN (and in every copy's sequence) after the pass: the caller commits
    or trims it.
    """
    ctx = tgt.ctx
    n_copies = len(copies)
    if n_copies:
        tgt.share_main(range(1, n_copies + 1))
    everyone = [MAIN, *range(1, n_copies + 1)]
    b = ctx.batch.clear()
    row0 = b.add_sequence(tgt.pending, tgt.n_past, everyone, True)
    base = tgt.n_past + len(tgt.pending)
    for j, tok in enumerate(answer):
        b.add(tok, base + j, [MAIN, *_copy_ids(copies, j)], True)
    todo = range(n_copies) if first_copies is None else first_copies
    copy_rows = _add_copies(tgt, answer, copies, todo)
    ctx.decode()
    logits = ctx.logits_all()
    feats = answer_features(logits[row0 : row0 + len(answer) + 1], answer, want_nll=want_nll, sampling=sampling,
                            want_entropy=want_entropy)
    res = PassResult(feats, n_decodes=1)
    for i, r in copy_rows.items():
        res.copy_logits[i] = logits[r, reduce_ids].astype(np.float64)
    return res


def judge_copies(tgt: KVState, answer: Sequence[int], copies: Sequence[Copy], which: Sequence[int],
                 reduce_ids: np.ndarray, res: PassResult) -> None:
    """Second stage: decode only the suffixes of copies `which` (the answer is in the KV)."""
    if not which:
        return
    ctx = tgt.ctx
    ctx.batch.clear()
    copy_rows = _add_copies(tgt, answer, copies, which)
    ctx.decode()
    logits = ctx.logits_all()
    res.n_decodes += 1
    for i, r in copy_rows.items():
        res.copy_logits[i] = logits[r, reduce_ids].astype(np.float64)


def _add_copies(tgt: KVState, answer: Sequence[int], copies: Sequence[Copy], which) -> dict[int, int]:
    """Append the suffix tokens of the chosen copies to the context's batch.

    A suffix that starts with the token the prefix already ends with (the answer's own
    end-of-turn token before a suffix that closes the turn) skips it, so the copy reads one
    turn end, not two.
    """
    b = tgt.ctx.batch
    base = tgt.n_past + len(tgt.pending)
    rows: dict[int, int] = {}
    for i in which:
        c = copies[i]
        suffix = c.suffix
        if c.cut > 0 and suffix and answer[c.cut - 1] == suffix[0]:
            suffix = suffix[1:]
        if not suffix:  # degenerate: read the verdict where the prefix ends
            continue
        rows[i] = b.add_sequence(suffix, base + c.cut, i + 1, True)
    return rows
