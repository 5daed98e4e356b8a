"""The speculative loop: draft K x L -> ONE target decode over the draft trie -> verify -> commit.

Reads top to bottom as one iteration: propose (the Proposer, on the draft context), score
(one llama_decode: the pending token plus every trie node once, with the seq ids of all
drafts through it), verify (decode/blocks.py: a pure verifier from localspec.verify on rows
compacted to the union of their supports), commit (KVState.commit: the accepted draft's KV
becomes the main sequence in both contexts, nothing is re-evaluated), emit events.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from localspec.decode.autoregressive import target_step
from localspec.decode.blocks import PAD, one_hot, verify_rows
from localspec.decode.lookup import ChainProposer, LookupProposer
from localspec.decode.mtp import MtpProposer
from localspec.decode.proposer import DraftStop, DraftTrie, Proposer
from localspec.decode.stack import STACK, StackProposer
from localspec.decode.state import MAIN, KVState
from localspec.decode.suffix import SuffixProposer
from localspec.decode.turn import Turn
from localspec.events import Accepted, Drafted, Event, Rejected, Written
from localspec.sampling import SparseRow, greedy_rows, transform_row
from localspec.verify import Decision, NumpyRNG


def score(tgt: KVState, trie: DraftTrie) -> tuple[list[int], int | None]:
    """One target decode; returns the output row of each trie node (index = node id), root
    last, and the lane the block was evaluated on (KVState.lane: None for the trie)."""
    ctx = tgt.ctx
    K = trie.K
    lane = tgt.lane(K, trie.L)
    if lane is not None and lane != MAIN:
        tgt.catch_up()  # a branch starts from the newest main state (recurrent, no rollback)
    b = ctx.batch.clear()
    base = tgt.n_past + len(tgt.pending)
    # the trie: the pending tokens on every draft's sequence, each node on its drafts'; a
    # recurrent state: the pending tokens and the one draft on the lane alone
    root = b.add_sequence(tgt.pending, tgt.n_past, list(range(K + 1)) if lane is None else lane, True)
    rows = [b.add(n.token, base + n.depth - 1, n.seq_ids if lane is None else lane, True) for n in trie.nodes]
    if lane != MAIN:
        tgt.share_main(range(1, K + 1))  # the branch (or each draft) sees the main history
    ctx.decode()
    return rows + [root], lane


def verify_block(
    turn: Turn, trie: DraftTrie, x: np.ndarray, rows: list[int], method: str, rng: NumpyRNG
) -> Decision:
    """The target's rows along every draft (read once per trie node) -> the verifier's
    decision on the drafts x (trie.tokens())."""
    K = trie.K
    out_rows = [[rows[-1]] + [rows[n] for n in trie.path[k]] for k in range(K)]  # (K, len+1) output rows
    logits = turn.target.ctx.logits_all()
    needed = set(sum(out_rows, []))
    tgt_rows: dict[int, SparseRow]
    if turn.cfg.sampling.greedy:
        amax = greedy_rows(logits)  # one pass over the rows, no transform
        tgt_rows = {r: one_hot(int(amax[r])) for r in needed}
    else:
        tgt_rows = {r: transform_row(logits[r], turn.cfg.sampling) for r in needed}
    p_rows = [[tgt_rows[r] for r in rk] for rk in out_rows]
    return verify_rows(method, rng, p_rows, trie.q, x)


@dataclass
class SpecSettings:
    """What one speculative iteration runs with (auto may change it between iterations)."""

    method: str
    K: int
    L: int
    stop: DraftStop | None = None  # dynamic draft length (None: always L tokens)
    per_draft: bool = False  # each draft ends by its own path (exact for K >= 2 at T > 0)


@dataclass
class IterationResult:
    """What one speculative iteration did: its events, the verifier's decision, the length
    of the draft it accepted from, the draft's confidences along it, and where the time went."""

    events: list[Event]
    decision: Decision  # token: a vocabulary id
    drafted: int  # length of the accepted draft (its own, not the trie's)
    confs: list[float] = field(default_factory=list)
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    overhead_seconds: float = 0.0


def spec_iteration(turn: Turn, st: SpecSettings, proposer: Proposer, rng: NumpyRNG) -> IterationResult | None:
    """One iteration: draft, score (one decode), verify, commit. None when the context is full.

    A proposer with nothing to draft (a lookup without a match) returns None: the target
    then writes the token itself (one plain step, as AR)."""
    stats, emitter = turn.stats, turn.emitter
    tgt, dft = turn.target, proposer.draft
    L = min(st.L, emitter.remaining + 1)
    room = tgt.ctx.n_ctx - max(tgt.n_past + len(tgt.pending), dft.n_past + len(dft.pending) if dft else 0)
    stacked = isinstance(proposer, StackProposer)
    L = min(L, (room - 1) // (max(st.K, 1) + stacked))  # a stack adds the lookup's draft
    if L < 1:
        return None
    t0 = time.perf_counter()
    greedy_first = st.K > 1 and turn.cfg.sampling.greedy
    trie = proposer.propose(tgt.committed, st.K, L, st.stop, greedy_first, st.per_draft)
    t1 = time.perf_counter()
    if trie is None:
        written = target_step(turn)
        if written is None:
            return None
        stats.iterations += 1
        return IterationResult([written], Decision(0, 0, written.tokens[0]), 0, [], t1 - t0,
                               time.perf_counter() - t1, 0.0)
    rows, lane = score(tgt, trie)
    t2 = time.perf_counter()
    x = trie.tokens()
    # drafts from different proposers: only rrs reads each draft's own q (decode/stack.py)
    d = verify_block(turn, trie, x, rows, "rrs" if trie.source == STACK else st.method, rng)
    own = trie.length(d.k)
    acc = [int(t) for t in x[d.k, : d.tau]]
    tgt.commit(acc, d.token, seq=d.k + 1 if lane is None else lane)
    proposer.accept(trie, d.k, d.tau, d.token)
    stats.iterations += 1
    stats.target_calls += 1
    stats.draft_calls += trie.draft_calls
    stats.record(d.tau, own)
    source = trie.source
    if trie.source == STACK:  # the lookup's draft 0 beside the model's: count the lookup's
        lookup = proposer.lookup_source
        source = lookup if d.k == 0 else "draft"  # who wrote the draft the verifier kept
        stats.record_proposed(lookup, trie.length(0), d.tau if d.k == 0 else 0)
        if d.k != 0:  # the lookup's tokens were verified too: in `drafted` beside the model's
            stats.drafted += trie.length(0)
        stats.stacked += 1
    elif trie.source != "draft":
        stats.record_proposed(trie.source, own, d.tau)
    events = _events(turn, x, d, acc, own, source)
    t3 = time.perf_counter()
    stats.draft_seconds += t1 - t0
    stats.verify_seconds += t2 - t1
    stats.overhead_seconds += t3 - t2
    return IterationResult(events, d, own, trie.conf[d.k], t1 - t0, t2 - t1, t3 - t2)


def _events(turn: Turn, x: np.ndarray, d: Decision, acc: list[int], own: int, source: str) -> list[Event]:
    """Drafted, Accepted, Rejected and the target's Written token of one iteration; the
    draft events name the proposer that wrote this iteration's trie (frontends colour by it)."""
    model, emitter = turn.target_model, turn.emitter
    drafts = tuple(tuple(int(t) for t in row if t != PAD) for row in x)
    events: list[Event] = [Drafted(drafts, tuple(model.detokenize(row) for row in drafts), source)]
    taken, text = emitter.push(acc)
    events.append(Accepted(d.k, d.tau, tuple(acc[:taken]), text, source))
    rej = drafts[d.k][d.tau :]
    if rej:
        events.append(Rejected(d.k, rej, model.detokenize(rej), source))
    if not emitter.done:
        _, text = emitter.push([d.token])
        events.append(Written((d.token,), text, "bonus" if d.tau == own else "correction"))
    return events


def make_proposer(
    turn: Turn, kinds: tuple[str, ...] | None = None
) -> Proposer | LookupProposer | MtpProposer | ChainProposer:
    """The proposers --spec-type names (or `kinds`), in its order (default: the draft model)."""
    cfg = turn.cfg
    parts: list = []
    for kind in cfg.proposers if kinds is None else kinds:
        if "+" in kind:  # a stack: the lookup and the draft model in one trie
            lookup, model = make_proposer(turn, (kind.split("+")[0],)), make_proposer(turn, ("draft",))
            parts.append(StackProposer(lookup, model, kind.split("+")[0]))
        elif kind == "ngram":
            parts.append(LookupProposer(cfg.ngram_min, cfg.ngram_max))
        elif kind == "suffix":
            assert turn.suffix is not None, "the runtime gives a suffix turn the session's store"
            parts.append(SuffixProposer(turn.suffix, cfg.suffix_depth, cfg.suffix_min_prob, cfg.suffix_factor))
        elif kind == "mtp":
            assert turn.mtp is not None, "the runtime refuses mtp without a head (decode/mtp.mtp_config)"
            parts.append(MtpProposer(turn.mtp, turn.target, cfg.draft_sampling(), turn.rng))
        elif turn.draft is not None:
            parts.append(Proposer(turn.draft, cfg.draft_sampling(), turn.rng))
    assert parts, "a speculative method with no proposer (the runtime checks for a draft)"
    return parts[0] if len(parts) == 1 else ChainProposer(parts)


def speculative_loop(turn: Turn) -> Iterator[Event]:
    """Generate with K drafts of L tokens per target call, verified by the configured method."""
    cfg = turn.cfg
    kinds = ",".join(cfg.proposers) if cfg.proposers != ("draft",) else ""
    turn.stats.ran = f"{turn.method} K={cfg.K} L={cfg.L}" + (f" {kinds}" if kinds else "")
    yield from run_blocks(turn, SpecSettings(turn.method, cfg.K, cfg.L))


def run_blocks(turn: Turn, st: SpecSettings) -> Iterator[Event]:
    """Speculative iterations with fixed settings until the turn stops (also PARSE's
    `--parse-resume spec` finish)."""
    rng = NumpyRNG(turn.rng)
    proposer = make_proposer(turn)
    while not turn.should_stop():
        res = spec_iteration(turn, st, proposer, rng)
        if res is None:
            turn.emitter.close("context_full")
            return
        yield from res.events
        yield turn.tick()
