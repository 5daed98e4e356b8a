"""The speculative loop: draft K x L -> ONE target decode over the draft trie -> verify -> commit.

Reads top to bottom as one iteration: propose (draft context), score (one llama_decode: the
pending token plus every trie node once, with the seq ids of all drafts through it), verify
(a pure function from localspec.verify on rows compacted to the union of their supports),
commit (accepted draft's KV becomes the main sequence in both contexts, nothing is
re-evaluated), emit events.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from localspec.config import GenConfig, SamplingConfig
from localspec.decode.proposer import PAD, DraftStop, DraftTrie, commit_draft, propose
from localspec.decode.state import MAIN, KVState
from localspec.decode.turn import Turn
from localspec.events import Accepted, Drafted, Event, Rejected, Written
from localspec.sampling import SparseRow, greedy_rows, transform_row
from localspec.verify import VERIFIERS, Decision, NumpyRNG


def score(tgt: KVState, trie: DraftTrie) -> list[int]:
    """One target decode; returns the output row of each trie node (index = node id), root last."""
    ctx = tgt.ctx
    K = trie.K
    b = ctx.batch.clear()
    root = b.add_sequence(tgt.pending, tgt.n_past, list(range(K + 1)), True)
    base = tgt.n_past + len(tgt.pending)
    rows = [b.add(n.token, base + n.depth - 1, n.seq_ids, True) for n in trie.nodes]
    tgt.share_main(range(1, K + 1))
    ctx.decode()
    return rows + [root]


def _compact(rows: list[SparseRow], extra: np.ndarray) -> np.ndarray:
    """Sorted union of the supports of `rows` and the tokens in `extra`."""
    return np.unique(np.concatenate([r.ids for r in rows] + [extra.ravel()]))


def verify_block(
    turn: Turn, trie: DraftTrie, rows: list[int], method: str, rng: NumpyRNG
) -> Decision:
    """Build p (K, L+1, V') and q (K, L, V') over the union vocabulary V' and call the verifier.

    Drafts that ended before L (per-draft lengths) are padded with one extra column, a token
    the target never emits: q = 1 on it, p = 0, so the verifier rejects it and never emits
    it; the target rows after the padding are never reached (uniform filler, as in the
    enumeration that proves this exact, tests/test_verify_exact.py).
    """
    ctx = turn.target.ctx
    K, L = trie.K, trie.L
    x = trie.tokens()
    lens = [trie.length(k) for k in range(K)]
    padded = min(lens) < L
    root_row = rows[-1]
    out_rows = [[root_row] + [rows[n] for n in trie.path[k]] for k in range(K)]  # (K, len+1) output rows
    logits = ctx.logits_all()
    if turn.cfg.sampling.temp <= 0.0:
        amax = greedy_rows(logits)  # one pass over the rows, no transform
        tgt_rows = {r: SparseRow(np.array([amax[r]]), np.ones(1)) for r in set(sum(out_rows, []))}
    else:
        tgt_rows = {r: transform_row(logits[r], turn.cfg.sampling) for r in set(sum(out_rows, []))}
    q_rows = [r for qk in trie.q for r in qk]
    vocab = _compact(list(tgt_rows.values()) + q_rows, x[x != PAD])
    V = vocab.size
    W = V + 1 if padded else V  # column V: the padding token
    p = np.zeros((K, L + 1, W))
    q = np.zeros((K, L, W))
    for k in range(K):
        for i, r in enumerate(out_rows[k]):
            row = tgt_rows[r]
            p[k, i, np.searchsorted(vocab, row.ids)] = row.probs
        for i, row in enumerate(trie.q[k]):
            q[k, i, np.searchsorted(vocab, row.ids)] = row.probs
        if lens[k] < L:
            p[k, lens[k] + 1 :, :V] = 1.0 / V
            q[k, lens[k] :, V] = 1.0
    xc = np.where(x == PAD, V, np.searchsorted(vocab, np.where(x == PAD, vocab[0], x)))
    d = VERIFIERS[method](rng, p, q, xc)
    if d.token >= V or d.tau > lens[d.k]:
        raise AssertionError(f"verifier {method} accepted the padding token (tau={d.tau}, token={d.token})")
    return replace(d, token=int(vocab[d.token]))


@dataclass
class SpecSettings:
    """What one speculative iteration runs with (auto may change it between iterations)."""

    method: str
    K: int
    L: int
    stop: DraftStop | None = None  # dynamic draft length (None: always L tokens)
    per_draft: bool = False  # each draft ends by its own path (exact for K >= 2 at T > 0)


def spec_iteration(turn: Turn, st: SpecSettings, rng: NumpyRNG, dsampling: SamplingConfig) -> list[Event] | None:
    """One iteration: draft, score (one decode), verify, commit. None when the context is full."""
    assert turn.draft is not None
    stats, emitter = turn.stats, turn.emitter
    tgt, dft = turn.target, turn.draft
    model = turn.target_model
    L = min(st.L, emitter.remaining + 1)
    room = tgt.ctx.n_ctx - max(tgt.n_past + len(tgt.pending), dft.n_past + len(dft.pending))
    L = min(L, (room - 1) // max(st.K, 1))
    if L < 1:
        return None
    t0 = time.perf_counter()
    dft.sync_to(tgt.committed)
    greedy_first = st.K > 1 and turn.cfg.sampling.temp <= 0.0
    trie = propose(dft, st.K, L, dsampling, turn.rng, st.stop, greedy_first, st.per_draft)
    t1 = time.perf_counter()
    rows = score(tgt, trie)
    t2 = time.perf_counter()
    d = verify_block(turn, trie, rows, st.method, rng)
    # commit: the accepted draft's cells become seq 0 in both contexts
    x = trie.tokens()
    own = trie.length(d.k)
    acc = [int(t) for t in x[d.k, : d.tau]]
    base = tgt.n_past + len(tgt.pending)
    if d.tau:
        tgt.ctx.seq_cp(d.k + 1, MAIN, base, base + d.tau)
    tgt.drop_drafts()
    tgt.tokens.extend(tgt.pending)
    tgt.tokens.extend(acc)
    tgt.pending = [d.token]
    commit_draft(dft, trie, d.k, d.tau, d.token)
    stats.iterations += 1
    stats.target_calls += 1
    stats.draft_calls += trie.evaluated_depth + 1
    stats.record(d.tau, own)
    drafts = tuple(tuple(int(t) for t in row if t != PAD) for row in x)
    events: list[Event] = [Drafted(drafts, tuple(model.detokenize(row) for row in drafts))]
    taken, text = emitter.push(acc)
    events.append(Accepted(d.k, d.tau, tuple(acc[:taken]), text))
    rej = drafts[d.k][d.tau :]
    if rej:
        events.append(Rejected(d.k, rej, model.detokenize(rej)))
    if not emitter.done:
        _, text = emitter.push([d.token])
        events.append(Written((d.token,), text, "bonus" if d.tau == own else "correction"))
    t3 = time.perf_counter()
    stats.draft_seconds += t1 - t0
    stats.verify_seconds += t2 - t1
    stats.overhead_seconds += t3 - t2
    turn.last_decision = (d.tau, own, t3 - t2)
    turn.last_confs = trie.conf[d.k]
    return events


def draft_sampling(cfg: GenConfig) -> SamplingConfig:
    """The draft's transform: the target's, at --draft-temp when given.

    With a greedy target and no --draft-temp, K > 1 drafts are identical greedy drafts
    (measured: a greedy + sampled-alternatives tree gained nothing on the F16 pair and
    changes verification batch shapes, hence batch-size numerics); --draft-temp turns the
    alternatives on.
    """
    return replace(cfg.sampling, temp=cfg.sampling.temp if cfg.draft_temp is None else cfg.draft_temp)


def speculative_loop(turn: Turn) -> Iterator[Event]:
    """Generate with K drafts of L tokens per target call, verified by the configured method."""
    cfg = turn.cfg
    yield from run_blocks(turn, SpecSettings(turn.method or cfg.method, cfg.K, cfg.L))


def run_blocks(turn: Turn, st: SpecSettings) -> Iterator[Event]:
    """Speculative iterations with fixed settings until the turn stops (also PARSE's
    `--parse-resume spec` finish)."""
    cfg = turn.cfg
    rng = NumpyRNG(turn.rng)
    dsampling = draft_sampling(cfg)
    while not turn.should_stop():
        events = spec_iteration(turn, st, rng, dsampling)
        if events is None:
            turn.emitter.close("context_full")
            return
        yield from events
        yield turn.tick()
