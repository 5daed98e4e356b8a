"""The draft model's drafter: K i.i.d. drafts of up to L tokens, in lockstep.

One llama_decode per draft step carries the newest token of every distinct draft; drafts
that are still identical share their tokens (one trie node, the seq ids of all its drafts),
so K drafts that agree cost what one costs. Only the sparse probability rows the verifier
needs are kept.

`ModelDrafter` is the draft model behind the drafter interface (base.py): `propose` drafts
on the draft context, `accept` keeps the verifier's choice in the draft's KV, `learn` lets
the dynamic draft length (auto's acceptance estimate) learn from what the target accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from localspec.config import SamplingConfig
from localspec.decode.constrained import Matcher, masked_dist
from localspec.decode.drafters.base import MODEL, DrafterBase, DraftRequest, Outcome
from localspec.decode.drafters.trie import DraftStop, DraftTrie, Node
from localspec.decode.state import KVState
from localspec.sampling import SparseRow, sample_row, transform_row

if TYPE_CHECKING:
    from localspec.costmodel import CostModel
    from localspec.decode.turn import Turn
    from localspec.verify import Decision


def propose(
    dft: KVState,
    K: int,
    L: int,
    sampling: SamplingConfig,
    gen: np.random.Generator,
    stop: DraftStop | None = None,
    greedy_first: bool = False,
    per_draft: bool = False,
    hint: Sequence[int] = (),
    constraint: Matcher | None = None,
) -> DraftTrie:
    """Draft K x up to L tokens. dft.pending is evaluated first (with every draft's seq id).

    hint (K = 1, an attention draft): tokens the draft is likely to draft next (a lookup's
    continuation), evaluated on the draft's sequence in the same first decode. While the
    draft's own tokens equal them, their rows are already there and the depth costs no
    decode; at the first difference the rest is dropped from the KV and drafting goes on
    one decode per depth. The draft is the same sample of the same process either way (a
    row is used only for the very token it was computed after), so every verifier is
    unaffected; only the draft model's decodes are fewer (auto prices it: costmodel/lookup).

    Drafting stops early (length >= 1) when no draft's next token is worth its cost:
    `stop` weighs the chance that the draft so far AND its next token are accepted (the
    product over the path, from the draft's confidences) against the marginal draft + verify
    cost. Only that product matters: a confident token after an unsure one is rarely reached.

    greedy_first (only for a temperature-0 target, where any draft set is exact): draft 0
    follows the draft's argmax and the others sample, so the K drafts form a tree that
    keeps the best single guess and adds alternatives exactly where the draft is unsure.

    per_draft: each draft ends by the rule applied to its OWN path (drafts that still share
    a trie node share the decision), so the K drafts stay i.i.d. -- each is one sample of a
    draft process that ends itself and is padded to L with a token the target never emits
    (trie.tokens() writes PAD). The joint rule (stop when no draft's next token pays) makes
    mdbv with K >= 2 inexact at T > 0; the per-draft one keeps it exact
    (tests/test_verify_exact.py).
    """
    ctx = dft.ctx
    trie = DraftTrie(K=K, path=[[] for _ in range(K)], q=[[] for _ in range(K)], conf=[[] for _ in range(K)],
                     calls_model=True)
    # the pending tokens join every draft's sequence and the main one; a recurrent state
    # (KVState.lane) evaluates them on the main sequence alone (a token cannot sit in two
    # recurrent states) and drafts its one draft on a branch copied from it after
    lane = dft.lane(K, L, one_decode=False)
    b = ctx.batch.clear()
    base = dft.n_past + len(dft.pending)  # position of depth-1 tokens
    hint = list(hint[: L - 1]) if K == 1 and lane is None else []  # depth L's token is never evaluated
    hint_rows: list[int] = []
    if lane is None:
        dft.share_main(range(1, K + 1))
        row = b.add_sequence(dft.pending, dft.n_past, list(range(0, K + 1)), True)
        hint_rows = [b.add(t, base + i, 1, True) for i, t in enumerate(hint)]
        ctx.decode()
    else:
        row = b.add_sequence(dft.pending, dft.n_past, 0, True)
        ctx.decode()
        dft.absorb_pending()
        dft.share_main([lane])
    conf = _Confidence(sampling, stop is not None)
    first = ctx.logits(row)
    # under a grammar each branch samples from its rows masked at its own state (a fork of
    # the main sequence's matcher per branch; one branch consumes in place)
    m0 = constraint.fork() if constraint is not None else None
    buf = np.empty(first.shape[-1], dtype=np.float32) if m0 is not None else None

    def dist(lg: np.ndarray, m: Matcher | None) -> SparseRow:
        return transform_row(lg, sampling) if m is None else masked_dist(lg, sampling, m, buf)

    frontier: list[tuple[int, SparseRow, list[int], float, Matcher | None]] = [
        (-1, dist(first, m0), list(range(K)), 1.0, m0)
    ]
    confs = [conf(first, frontier[0][1])]
    for depth in range(1, L + 1):
        # chance that each frontier entry's path plus its next token is accepted
        reach = [f[3] * (stop.accept_prob(c) if stop else 1.0) for f, c in zip(frontier, confs, strict=True)]
        if depth > 1 and stop is not None:
            keep = _going_on(reach, lambda p, d=depth: stop.worth(d, p), per_draft)
            if not keep:
                break
            frontier, confs, reach = [frontier[i] for i in keep], [confs[i] for i in keep], [reach[i] for i in keep]
        new_nodes: list[int] = []
        new_reach: list[float] = []
        new_ms: list[Matcher | None] = []
        for (parent, r, members, _, m), c, p in zip(frontier, confs, reach, strict=True):
            groups: dict[int, list[int]] = {}
            for k in members:
                tok = int(r.ids[0]) if (greedy_first and k == 0) else sample_row(r, gen)
                groups.setdefault(tok, []).append(k)
                trie.q[k].append(r)
                trie.conf[k].append(c)
            ms = [None] * len(groups) if m is None else [m.fork() for _ in range(len(groups) - 1)] + [m]
            for (tok, ks), mk in zip(groups.items(), ms, strict=True):
                trie.nodes.append(Node(tok, depth, ks, parent))
                idx = len(trie.nodes) - 1
                new_nodes.append(idx)
                new_reach.append(p)
                if mk is not None:
                    mk.consume([tok])
                new_ms.append(mk)
                for k in ks:
                    trie.path[k].append(idx)
        if depth == L:
            break
        if K == 1 and new_ms[0] is not None and new_ms[0].forced(1):
            break  # the grammar forces what follows: the loop appends it free (constrained.fit), no decode
        # best case for the next token: drafted at full confidence (the calibration's top bin);
        # where not even that would pay, skip the decode that would feed it
        if stop is not None:
            top = stop.accept_prob(1.0)
            keep = _going_on(new_reach, lambda p, d=depth + 1, t=top: stop.worth(d, p * t), per_draft)
            if not keep:
                break
            new_nodes, new_reach = [new_nodes[i] for i in keep], [new_reach[i] for i in keep]
            new_ms = [new_ms[i] for i in keep]
        if hint and trie.nodes[new_nodes[0]].token == hint[0]:  # K = 1: one node per depth
            rows = [hint_rows[depth - 1]]  # evaluated in the first decode
            hint = hint[1:]
            trie.hinted += 1
        else:
            if hint:  # the draft went another way: its KV past this depth is the hint's, not its own
                ctx.seq_rm(1, base + depth - 1, -1)
                hint = []
            b = ctx.batch.clear()
            rows = [b.add(trie.nodes[n].token, base + depth - 1, trie.nodes[n].seq_ids, True) for n in new_nodes]
            ctx.decode()
        trie.evaluated_depth = depth
        frontier, confs = [], []
        for n, r, p, mk in zip(new_nodes, rows, new_reach, new_ms, strict=True):
            trie.nodes[n].evaluated = True
            lg = ctx.logits(r)
            frontier.append((n, dist(lg, mk), trie.nodes[n].members, p, mk))
            confs.append(conf(lg, frontier[-1][1]))
    return trie


def _going_on(reach: list[float], worth: Callable[[float], bool], per_draft: bool) -> list[int]:
    """Indices of the branches that draft on: each judged on its own path (per_draft), or
    all of them while the best one still pays (the joint rule)."""
    if per_draft:
        return [i for i, p in enumerate(reach) if worth(p)]
    return list(range(len(reach))) if worth(max(reach)) else []


class _Confidence:
    """The draft's confidence in its next token: its top probability.

    Sampled drafts read it off the transformed row. A greedy row is one-hot (probability 1
    whatever the logits), which would switch the cut-off off exactly where drafts are long;
    there the confidence is the top probability of the untempered softmax, 1 / sum(exp(l -
    max)). Only the logits within CUT of the top are exponentiated: a language model's row
    has a few dozen there (Qwen2.5-Coder 0.5B on code: median 55 of 151,936 within 15), and
    the rest add at most V * exp(-CUT) to a sum >= 1 (3e-4 relative for V = 152k). The full
    exp of a row cost 0.3-0.45 ms a draft step here (2-3 % of a 0.5B draft step on 2
    cores); the cut 0.04 ms. A flat row (the first token of an answer) takes the full path's
    time, no more.
    """

    CUT = 20.0

    def __init__(self, sampling: SamplingConfig, needed: bool) -> None:
        self.raw = sampling.greedy and needed

    def __call__(self, logits: np.ndarray, row: SparseRow) -> float:
        if not self.raw:
            return float(row.probs[0])
        top = logits[row.ids[0]]
        near = logits[logits > top - self.CUT]
        return float(1.0 / np.exp(near - top).sum(dtype=np.float64))


def commit_draft(dft: KVState, trie: DraftTrie, k: int, tau: int, correction: int) -> None:
    """Keep draft k's first tau tokens as the draft's main sequence; y becomes pending.

    Only the tokens the draft model evaluated (a draft's last token usually is not, and a
    draft that ended early leaves a hole a sibling's same-depth token does not fill) join
    the main sequence; the rest become pending ahead of the correction."""
    path = trie.path[k][:tau]
    keep = next((i for i, n in enumerate(path) if not trie.nodes[n].evaluated), len(path))
    dft.commit([trie.nodes[n].token for n in path], correction, seq=k + 1, evaluated=keep)


class Learner(Protocol):
    """What learns the draft's acceptance (costmodel.Acceptance): positions 0..tau-1 of an
    L-token draft accepted, with the draft's confidence at each position."""

    def update(self, tau: int, L: int, confs: list[float] | None = None) -> None: ...


class ModelDrafter(DrafterBase):
    """The draft model (`--spec-type draft`): drafts, keeps the accepted draft, learns.

    sampling: the draft's transform (the target's, at --draft-temp when given); gen: the
    turn's random stream; learner: updated with every verification outcome (auto's
    calibrated acceptance), None when nothing learns (fixed settings)."""

    name = "draft"
    kind = MODEL

    def __init__(
        self, draft: KVState, sampling: SamplingConfig, gen: np.random.Generator, learner: Learner | None = None
    ) -> None:
        self.draft = draft
        self.sampling = sampling
        self.gen = gen
        self.learner = learner
        self.hint: list[int] = []  # for the next propose only (auto sets it: see propose's hint)

    def propose(self, req: DraftRequest) -> DraftTrie:
        """Catch the draft up with the target's committed tokens, then draft (see propose)."""
        self.draft.sync_to(req.committed)
        hint, self.hint = self.hint, []
        return propose(self.draft, req.K, req.L, self.sampling, self.gen, req.stop, req.greedy_first,
                       req.per_draft, hint, req.constraint)

    def accept(self, trie: DraftTrie, d: Decision) -> None:
        """The verifier kept draft d.k's first d.tau tokens and then emitted d.token."""
        commit_draft(self.draft, trie, d.k, d.tau, d.token)

    def learn(self, outcome: Outcome) -> None:
        """Learn from one verification: tau of `drafted` tokens accepted."""
        if self.learner is not None:
            self.learner.update(outcome.tau, outcome.drafted, outcome.confs)


def build(turn: Turn, auto: CostModel | None = None) -> ModelDrafter | None:
    """The registry's builder: the session's draft model, learning into auto's estimate."""
    if turn.draft is None:
        return None
    return ModelDrafter(turn.draft, turn.cfg.draft_sampling(), turn.rng,
                        learner=auto.acceptance if auto is not None else None)
