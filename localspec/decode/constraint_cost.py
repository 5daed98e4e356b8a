"""What a grammar costs the loop per iteration, in Python: `bench constraint`'s measurement.

A constrained iteration does three things the unconstrained one does not (decode/constrained.py):
`fit` (the draft checked against the grammar, forced tokens appended), `target_rows` (every
verify row read at its node's grammar state: consume / rollback along the trie, a mask where
the sampling needs one) and `commit` (the accepted tokens consumed). This replays a real answer
in iterations of L drafted tokens on real target rows — one teacher-forced decode of prompt +
answer gives every row — and times exactly those three calls per iteration, nothing of the
decode. At T = 0 a row needs a mask only where its argmax is refused; at T > 0 every row does.
"""

from __future__ import annotations

import time

import numpy as np

from localspec.backend.context import Context
from localspec.backend.grammar import eog_ids, ll_tokenizer
from localspec.backend.model import Model
from localspec.config import SamplingConfig
from localspec.constrain import Constraint, ConstraintSpec
from localspec.decode.constrained import TurnConstraint
from localspec.decode.drafters.trie import chain_trie
from localspec.sampling import transform_row


def iteration_costs(model: Model, spec: ConstraintSpec, prompt: list[int], answer: list[int], L: int,
                    sampling: SamplingConfig, threads: int | None = None) -> tuple[list[float], list[float]]:
    """Seconds per iteration when `answer` (valid under `spec`) is drafted L tokens at a time
    and every draft is right: (the constrained work: fit, rows, commit; the unconstrained
    reading of the same rows, what an iteration without a grammar pays for them)."""
    ctx = Context(model, n_ctx=len(prompt) + len(answer) + 8, n_batch=max(512, len(prompt) + len(answer)),
                  n_seq_max=1, threads=threads)
    try:
        b = ctx.batch.clear()
        first = len(prompt) - 1
        for i, t in enumerate(prompt + answer):
            b.add(t, i, 0, logits=i >= first)
        ctx.decode(b)
        logits = np.array(ctx.logits_all(), copy=True)  # row j: after prompt + answer[:j]
    finally:
        ctx.close()
    con = TurnConstraint(Constraint(spec, ll_tokenizer(model), model.n_vocab, eog_ids(model)).matcher(),
                         model.n_vocab, spec.kind)
    out: list[float] = []
    base: list[float] = []
    i = 0
    while i < len(answer):
        toks = answer[i:i + L]
        trie = chain_trie(toks, "bench")
        t0 = time.perf_counter()
        fitted = con.fit(trie, L)
        if fitted is not None:
            rows = [i + 1 + j for j in range(len(fitted.nodes))] + [i]
            rows = [min(r, len(logits) - 1) for r in rows]
            con.target_rows(fitted, rows, logits, sampling)
        step = answer[i:i + len(toks) + 1]
        con.commit(step)
        t1 = time.perf_counter()
        for r in rows if fitted is not None else [i]:
            if sampling.greedy:
                np.argmax(logits[r])
            else:
                transform_row(logits[r], sampling)
        base.append(time.perf_counter() - t1)
        out.append(t1 - t0)
        i += len(step)
    return out, base


def forced_runs(constraint: Constraint, answer: list[int]) -> list[int]:
    """runs[i]: how many answer tokens from position i on the grammar forces (its forced
    tokens, as the `grammar` drafter drafts them, that the answer goes on with): what
    `bench ceiling` adds to the lookups' drafts on a constrained answer. 0 where nothing is
    forced, or where the model wrote the forced text in other tokens than the grammar's."""
    m = constraint.matcher()
    runs = [0] * len(answer)
    for i, t in enumerate(answer):
        forced = m.forced(len(answer) - i)
        k = 0
        while k < len(forced) and forced[k] == answer[i + k]:
            k += 1
        runs[i] = k
        try:
            m.consume([t])
        except ValueError:  # the answer left the grammar (it cannot: it was decoded under it); stop counting
            break
    return runs
