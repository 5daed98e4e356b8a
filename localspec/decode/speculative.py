"""The speculative loop: draft K x L -> ONE target decode over the draft trie -> verify -> commit.

Reads top to bottom as one iteration: propose (a drafter: decode/drafters), score
(one llama_decode: the pending token plus every trie node once, with the seq ids of all
drafts through it), verify (decode/blocks.py: a pure verifier from localspec.verify on rows
compacted to the union of their supports), commit (KVState.commit: the accepted draft's KV
becomes the main sequence in both contexts, nothing is re-evaluated), emit events.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from localspec.decode.autoregressive import ar_step, target_step
from localspec.decode.blocks import PAD, one_hot, verify_rows
from localspec.decode.drafters import registry
from localspec.decode.drafters.base import Drafter, DraftRequest
from localspec.decode.drafters.combine import ChainDrafter, StackDrafter
from localspec.decode.drafters.trie import GRAMMAR, PREDICTION, DraftStop, DraftTrie
from localspec.decode.logprobs import span_logprobs
from localspec.decode.state import MAIN, KVState
from localspec.decode.turn import Turn
from localspec.events import Accepted, Drafted, Event, Rejected, Stats, TokenLogprob, Written
from localspec.sampling import SparseRow, greedy_rows, transform_row
from localspec.verify import Decision, NumpyRNG

if TYPE_CHECKING:
    from localspec.costmodel import CostModel

DRAFT_MODEL = "draft"  # the drafter whose counts are the totals (stats.record), not per-drafter


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
    if turn.constraint is not None:  # every row read at its node's grammar state (decode/constrained.py)
        tgt_rows = turn.constraint.target_rows(trie, rows, logits, turn.cfg.sampling)
    elif turn.cfg.sampling.greedy:
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
    rows: int = 1  # target rows the verify pass evaluated (the pending token(s) and the trie)
    draft_calls: int = 0  # draft-model decodes drafting took (0: a lookup, the grammar)


def spec_iteration(turn: Turn, st: SpecSettings, drafter: Drafter, rng: NumpyRNG) -> IterationResult | None:
    """One iteration: draft, score (one decode), verify, commit. None when the context is full.

    A drafter with nothing to draft (a lookup without a match) returns None: the target
    then writes the token itself (one plain step, as AR)."""
    stats, emitter = turn.stats, turn.emitter
    tgt, dft = turn.target, drafter.draft
    L = min(st.L, emitter.remaining + 1)
    room = tgt.ctx.n_ctx - max(tgt.n_past + len(tgt.pending), dft.n_past + len(dft.pending) if dft else 0)
    L = min(L, (room - 1) // (max(st.K, 1) + drafter.extra_drafts))
    if L < 1:
        return None
    t0 = time.perf_counter()
    greedy_first = st.K > 1 and turn.cfg.sampling.greedy
    con = turn.constraint
    trie = drafter.propose(DraftRequest(tgt.committed, st.K, L, st.stop, greedy_first, st.per_draft,
                                        con.matcher if con is not None else None))
    if trie is not None and con is not None:
        trie = con.fit(trie, L)  # refused tails cut, forced tokens appended
    t1 = time.perf_counter()
    if trie is None:
        written = target_step(turn)
        if written is None:
            return None
        stats.iterations += 1
        return IterationResult([written], Decision(0, 0, written.tokens[0]), 0, [], t1 - t0,
                               time.perf_counter() - t1, 0.0)
    n_rows = len(tgt.pending) + len(trie.nodes)
    rows, lane = score(tgt, trie)
    t2 = time.perf_counter()
    x = trie.tokens()
    d = verify_block(turn, trie, x, rows, trie.verifier or st.method, rng)  # a stack names rrs
    own = trie.length(d.k)
    acc = [int(t) for t in x[d.k, : d.tau]]
    lps = _logprobs(turn, trie, rows, d, acc)  # before anything decodes again on the target
    tgt.commit(acc, d.token, seq=d.k + 1 if lane is None else lane)
    if con is not None:
        con.commit([*acc, d.token])
    drafter.accept(trie, d)
    stats.iterations += 1
    stats.target_calls += 1
    stats.draft_calls += trie.draft_calls
    stats.record(d.tau, own)
    _count(stats, trie, d, own)
    events = _events(turn, x, d, acc, own, trie.source_of(d.k), trie.forced, lps)
    t3 = time.perf_counter()
    stats.draft_seconds += t1 - t0
    stats.verify_seconds += t2 - t1
    stats.overhead_seconds += t3 - t2
    return IterationResult(events, d, own, trie.conf[d.k], t1 - t0, t2 - t1, t3 - t2, n_rows, trie.draft_calls)


def _count(stats: Stats, trie: DraftTrie, d: Decision, own: int) -> None:
    """Per-drafter counts besides the draft model's (stats.record keeps the totals): what
    each drafter other than the draft model drafted and had accepted; in a stack, the other
    drafters' drafts were verified too (in `drafted` beside the kept one's)."""
    if trie.sources is None:
        mine = own - trie.forced  # a grammar's forced tail is the grammar drafter's (constrained.fit)
        if trie.forced:
            stats.record_proposed(GRAMMAR, trie.forced, max(0, d.tau - mine))
        if trie.source != DRAFT_MODEL:
            stats.record_proposed(trie.source, mine, min(d.tau, mine))
        return
    for k, src in enumerate(trie.sources):
        if src != DRAFT_MODEL and (k == d.k or trie.sources.index(src) == k):
            stats.record_proposed(src, trie.length(k), d.tau if k == d.k else 0)
            if k != d.k:
                stats.drafted += trie.length(k)
    stats.stacked += 1


def _logprobs(turn: Turn, trie: DraftTrie, rows: list[int], d: Decision, acc: list[int]) -> tuple[TokenLogprob, ...]:
    """The target's entries for the kept tokens and the one it wrote, read from the rows of
    the verify pass along draft d.k (the row before each token), when the config asks."""
    n_top = turn.cfg.logprobs
    if n_top is None:
        return ()
    out = [rows[-1]] + [rows[n] for n in trie.path[d.k]]
    return span_logprobs(turn.target_model, turn.target.ctx.logits_all(), out[: len(acc) + 1], [*acc, d.token], n_top)


def _events(turn: Turn, x: np.ndarray, d: Decision, acc: list[int], own: int, source: str,
            forced: int = 0, lps: tuple[TokenLogprob, ...] = ()) -> list[Event]:
    """Drafted, Accepted, Rejected and the target's Written token of one iteration; the
    draft events name the proposer that wrote this iteration's trie (frontends colour by it).
    A grammar's forced tail (constrained.fit) is accepted as the grammar's own span."""
    model, emitter = turn.target_model, turn.emitter
    drafts = tuple(tuple(int(t) for t in row if t != PAD) for row in x)
    events: list[Event] = [Drafted(drafts, tuple(model.detokenize(row) for row in drafts), source)]
    mine = min(len(acc), own - forced) if d.k == 0 else len(acc)
    for i, (part, by, at) in enumerate(((acc[:mine], source, 0), (acc[mine:], GRAMMAR, mine))):
        if i == 0 or (part and not emitter.done):  # the kept draft's own span always, then the forced tail
            taken, text = emitter.push(part)
            events.append(Accepted(d.k, len(part), tuple(part[:taken]), text, by, lps[at : at + taken]))
    rej = drafts[d.k][d.tau :]
    if rej:
        events.append(Rejected(d.k, rej, model.detokenize(rej), source))
    if not emitter.done:
        taken, text = emitter.push([d.token])
        events.append(Written((d.token,), text, "bonus" if d.tau == own else "correction", lps[len(acc):][:taken]))
    return events


def make_drafter(turn: Turn, kinds: tuple[str, ...] | None = None, auto: CostModel | None = None) -> Drafter:
    """The drafters --spec-type names (or `kinds`), in its order, from the registry: one,
    a chain (`a,b`) or a stack (`lookup+model`, one trie). `auto`: they learn into its
    estimates."""
    parts: list[Drafter] = []
    for kind in turn.cfg.proposers if kinds is None else kinds:
        built = [registry.build(name, turn, auto) for name in kind.split("+")]
        if any(b is None for b in built):
            continue  # not here (no draft model, no head): the runtime's checks said so earlier
        parts.append(StackDrafter(built[0], built[1]) if len(built) == 2 else built[0])  # type: ignore[arg-type]
    assert parts, "a speculative method with no drafter (the runtime checks for a draft)"
    if turn.cfg.prediction and kinds is None and PREDICTION not in turn.cfg.parts:
        predicted = registry.build(PREDICTION, turn, auto)  # the client's prediction: tried first
        if predicted is not None:
            parts.insert(0, predicted)
    if turn.constraint is not None and kinds is None and GRAMMAR not in turn.cfg.parts:
        parts.insert(0, registry.build(GRAMMAR, turn, auto))  # forced tokens first: free drafts
    return parts[0] if len(parts) == 1 else ChainDrafter(parts)


@dataclass
class IterationPlan:
    """What a policy asks of the next iteration: speculate with `drafter` under `settings`,
    or (settings None) let the target write one token. `role` and `bet` are the policy's
    own notes for learning from the result (the loop never reads them)."""

    settings: SpecSettings | None
    drafter: Drafter | None = None
    role: str = ""
    bet: object = None


class Policy(Protocol):
    """Picks each iteration's plan and learns from its result: fixed methods are the
    trivial policy (FixedPolicy), `auto` the cost model's (decode/policy/auto.py)."""

    def next(self) -> IterationPlan: ...

    def learn(self, plan: IterationPlan, res: IterationResult | None) -> None: ...


class FixedPolicy:
    """The same plan every iteration (a fixed method; settings None: plain decoding)."""

    def __init__(self, settings: SpecSettings | None, drafter: Drafter | None = None) -> None:
        self.plan = IterationPlan(settings, drafter)

    def next(self) -> IterationPlan:
        return self.plan

    def learn(self, plan: IterationPlan, res: IterationResult | None) -> None:
        """Nothing to learn: the settings are fixed."""


def drive(turn: Turn, policy: Policy) -> Iterator[Event]:
    """The one loop every method runs: ask the policy, run the iteration, teach the policy,
    emit, until the turn stops (the context full ends it too)."""
    rng = NumpyRNG(turn.rng)
    while not turn.should_stop():
        plan = policy.next()
        res = None
        if plan.settings is None:
            events = ar_step(turn)
        else:
            assert plan.drafter is not None, "a speculative plan names its drafter"
            res = spec_iteration(turn, plan.settings, plan.drafter, rng)
            events = res.events if res is not None else None
        if events is None:
            turn.emitter.close("context_full")
            return
        policy.learn(plan, res)
        yield from events
        yield turn.tick()


def speculative_loop(turn: Turn) -> Iterator[Event]:
    """Generate with K drafts of L tokens per target call, verified by the configured method."""
    cfg = turn.cfg
    kinds = ",".join(cfg.proposers) if cfg.proposers != ("draft",) else ""
    turn.stats.ran = f"{turn.method} K={cfg.K} L={cfg.L}" + (f" {kinds}" if kinds else "")
    drafter = make_drafter(turn)
    turn.prefill_draft(drafter)  # the draft model's prompt (if one drafts): prompt time, as llama.cpp counts it
    yield from run_blocks(turn, SpecSettings(turn.method, cfg.K, cfg.L), drafter)


def run_blocks(turn: Turn, st: SpecSettings, drafter: Drafter | None = None) -> Iterator[Event]:
    """Speculative iterations with fixed settings until the turn stops (also PARSE's
    `--parse-resume spec` finish), by `drafter` (default: the turn's, make_drafter)."""
    yield from drive(turn, FixedPolicy(st, drafter if drafter is not None else make_drafter(turn)))
