"""Where a greedy draft model agrees with a given answer: the draft's argmax at every position.

`bench ceiling -md` bounds what the draft model could add to the lookups. A greedy draft
that drafts from the target's own accepted text proposes, at position i, its argmax given
the prompt and the answer's first i tokens: exactly what one teacher-forced decode of
prompt + answer reads off its output rows. So one pass over the text tells, for every
position, whether a draft started there would have been right, with no speculative loop and
no timing mixed in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from localspec.backend.context import Context
from localspec.backend.model import Model
from localspec.placement.load import LoadOptions


def draft_agreement(path: Path, texts: list[tuple[list[int], list[int]]], threads: int,
                    n_batch: int = 512) -> list[list[bool]]:
    """Per (prompt, answer): agree[i] is True where the draft's greedy token after prompt +
    answer[:i] is answer[i]. The draft is loaded once for all texts; a text longer than
    n_batch is decoded in n_batch chunks, one sequence growing, so any memory kind (a
    recurrent state too) reads the same rows."""
    return [[a for a, _ in rows] for rows in draft_calibration(path, texts, threads, n_batch)]


def draft_calibration(path: Path, texts: list[tuple[list[int], list[int]]], threads: int,
                      n_batch: int = 512) -> list[list[tuple[bool, float]]]:
    """draft_agreement with the draft's confidence at each position: (its greedy token is the
    answer's, its top probability under the untempered softmax). The confidence is what the
    model drafter's length rule reads at T = 0 (drafters/model._Confidence), so these pairs
    fit the acceptance calibration a first turn starts from (`bench priors -md`)."""
    model = Model(path, load=LoadOptions(threads=threads))
    try:
        return [_agreement(model, prompt, answer, threads, n_batch) for prompt, answer in texts]
    finally:
        model.close()


def _agreement(model: Model, prompt: list[int], answer: list[int], threads: int,
               n_batch: int) -> list[tuple[bool, float]]:
    if not prompt or not answer:
        return [(False, 0.0)] * len(answer)
    ctx = Context(model, n_ctx=len(prompt) + len(answer) + 8, n_batch=n_batch, n_seq_max=1,
                  threads=threads, rs_snapshots=0)  # one growing sequence: nothing to roll back
    try:
        tokens = prompt + answer[:-1]  # the last answer token is never a draft's input
        first_out = len(prompt) - 1  # the row after the prompt's last token predicts answer[0]
        argmax: list[int] = []
        conf: list[float] = []
        for start in range(0, len(tokens), ctx.n_batch):
            chunk = tokens[start:start + ctx.n_batch]
            b = ctx.batch.clear()
            for j, tok in enumerate(chunk):
                b.add(tok, start + j, 0, logits=start + j >= first_out)
            ctx.decode(b)
            if b.n_outputs:
                rows = ctx.logits_all()
                argmax.extend(int(x) for x in np.argmax(rows, axis=1))
                for k in range(0, len(rows), 64):  # 64 rows at a time: no 300 MB temporary
                    part = rows[k:k + 64]
                    top = np.max(part, axis=1, keepdims=True)  # top prob = 1 / sum(exp(l - max))
                    conf.extend(float(x) for x in 1.0 / np.exp(part - top).sum(axis=1))
        return [(a == t, c) for a, t, c in zip(argmax, answer, conf, strict=True)]
    finally:
        ctx.close()
