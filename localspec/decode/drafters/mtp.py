"""The target's MTP head as a proposer (`--spec-type mtp`, llama.cpp's `draft-mtp`).

A Qwen3.5/3.6, GLM-4.5+, DeepSeek-V3 or MiMo target can carry its own draft: a nextn block
trained to guess the token after next from the target's hidden state. backend/mtp.py runs
it (an MTP context on the target model, fed the target's hidden rows); this module drafts
with it: one chain of up to L tokens, the first guess from the pending token paired with
the target's row before it, each next one chained on the head's own hidden row.

Lossless as any draft model is: each drafted token is sampled from q = the sampling
transform of the head's softmax (the draft's transform: the target's, at --draft-temp when
given), and the verifier gets exactly that row, so sd, gbv and mdbv (K = 1) keep the
target's distribution at T > 0; at T = 0 the draft is the head's argmax and a token is kept
when the target's argmax agrees (greedy text = AR).

`auto` drafts with the head by itself where a draft model would, when the session has a
head and no draft model (`build` under auto): the head's step is priced by the session's
draft curve (a draftless session's is free until then), started at HEAD_COST_PRIOR x one
target step and healed from the head's live steps as any curve is (CostCurve.observe),
across turns; its acceptance is learned as a draft model's is. So auto speculates only
where the head pays and falls back to plain decoding (or a lookup) where it does not.
`--spec-type mtp` names it explicitly: then sd / gbv run with a fixed -L (MTP_L).

Not built (docs/proposers.md): several heads chained (`llama_set_nextn_layer_offset`,
step35's layout); K > 1 drafts from the head.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from localspec.backend.mtp import MtpHead
from localspec.config import GenConfig, SamplingConfig, one_draft_verifier
from localspec.costmodel import CostModel
from localspec.costmodel.curves import CostCurve
from localspec.decode.constrained import masked_dist
from localspec.decode.drafters.base import MODEL, DrafterBase, DraftRequest, Outcome
from localspec.decode.drafters.trie import DraftTrie, Node
from localspec.decode.state import KVState
from localspec.decode.turn import Turn
from localspec.errors import ConfigError
from localspec.sampling import sample_row, transform_row

MTP_L = 3  # draft length without -L: llama.cpp's --spec-draft-n-max default for draft-mtp
# what auto prices one head step at before it has seen one, as a share of a target step: a
# head is one block and the LM head, so a fraction of the trunk; 0.3 errs high, which
# delays speculation by a probe at worst (a head priced free would speculate where it loses)
HEAD_COST_PRIOR = 0.3


def mtp_config(cfg: GenConfig, head: MtpHead | None) -> GenConfig:
    """The settings a turn that names `mtp` in --spec-type runs with, or a one-line refusal.

    `auto` does not price the head (its decodes are not timed by the cost model yet): with
    mtp it runs the lossless one-draft verifier for the sampling (sd greedy, gbv sampled)
    without the cost model, and -L defaults to MTP_L."""
    if "mtp" not in cfg.proposers:
        return cfg
    if head is None:
        raise ConfigError("--spec-type mtp: this session has no MTP head; open it with SessionOptions(mtp=True) "
                          "(the CLI does when --spec-type names mtp; not with -np > 1)")
    if cfg.method == "auto":
        cfg = replace(cfg, method=one_draft_verifier(cfg.sampling.greedy), K=1, auto_K=False)
    if cfg.auto_L:
        cfg = replace(cfg, L=MTP_L, auto_L=False)
    return cfg


class MtpDrafter(DrafterBase):
    """Drafts one chain with the target's MTP head (base.Drafter).

    `draft` is None: the head has no KV state of its own to keep in step, it follows the
    target's (backend/mtp.MtpHead reads every target decode), so `accept` has nothing to
    do. `propose` returns None while the target has not evaluated every committed token
    but the last (a recurrent target's branch that was not adopted): the head needs the
    target's row before the pending token, so the target writes that token itself."""

    name = "mtp"
    kind = MODEL

    def __init__(self, head: MtpHead, target: KVState, sampling: SamplingConfig, gen: np.random.Generator,
                 learner=None, curve: CostCurve | None = None) -> None:  # noqa: ANN001 - Acceptance
        self.head = head
        self.target = target
        self.sampling = sampling
        self.gen = gen
        self.learner = learner  # auto's acceptance estimate: every verification teaches it
        self.curve = curve  # auto's price of one head step: healed from the steps timed here

    def propose(self, req: DraftRequest) -> DraftTrie | None:
        """Up to L tokens (fewer when `stop` says the next one does not pay), K = 1."""
        K, L, stop = req.K, req.L, req.stop
        if K != 1:
            raise ConfigError(f"--spec-type mtp drafts one chain: use -K 1 (got -K {K})")
        tgt = self.target
        if len(tgt.pending) != 1:
            return None
        first = self.head.begin(tgt.tokens, tgt.pending[0])
        if first is None:
            return None
        logits, h = first
        base = tgt.n_past  # the pending token's position; depth d is drafted at base + d
        trie = DraftTrie(K=1, path=[[]], q=[[]], conf=[[]], source=self.name, calls_model=True)
        m = req.constraint.fork() if req.constraint is not None else None  # the head's rows masked too
        buf = np.empty(logits.shape[-1], dtype=np.float32) if m is not None else None
        reach = 1.0
        try:
            for depth in range(1, L + 1):
                row = transform_row(logits, self.sampling) if m is None else masked_dist(logits, self.sampling, m, buf)
                conf = float(row.probs[0])
                if stop is not None:
                    reach *= stop.accept_prob(conf)
                    if depth > 1 and not stop.worth(depth, reach):
                        break
                tok = sample_row(row, self.gen)
                if m is not None:
                    m.consume([tok])
                trie.nodes.append(Node(tok, depth, [0], depth - 2))
                trie.path[0].append(depth - 1)
                trie.q[0].append(row)
                trie.conf[0].append(conf)
                if depth == L:
                    break
                t0 = time.perf_counter()
                logits, h = self.head.step(tok, base + depth, h)
                if self.curve is not None:
                    self.curve.observe(1, time.perf_counter() - t0)
                trie.nodes[-1].evaluated = True
                trie.evaluated_depth = depth
        finally:
            self.head.rewind(base + 1)  # the chain's entries used the head's own rows: no history
        return trie

    def learn(self, outcome: Outcome) -> None:
        """Learn from one verification (auto's acceptance estimate, when it runs the head)."""
        if self.learner is not None:
            self.learner.update(outcome.tau, outcome.drafted, outcome.confs)


def build(turn: Turn, auto: CostModel | None = None) -> MtpDrafter | None:
    """The registry's builder. Named (--spec-type mtp): the head with fixed settings (the
    runtime refuses mtp without a head: mtp_config). Under auto, where a draft model would
    draft and the session has none: priced by a draft curve of its own step time (a
    draftless model's free curve starts at HEAD_COST_PRIOR x one target step), learning
    into auto's acceptance; K = 1 (the head drafts one chain; the turn plan says so)."""
    if turn.mtp is None:
        return None
    if auto is None:
        return MtpDrafter(turn.mtp, turn.target, turn.cfg.draft_sampling(), turn.rng)
    if turn.draft is not None:
        return None
    if auto.draft(1) <= 0.0:  # a draftless model's free draft curve: the head is not priced yet
        auto.draft = CostCurve([1], [HEAD_COST_PRIOR * auto.target(1)], prior=True)
    return MtpDrafter(turn.mtp, turn.target, turn.cfg.draft_sampling(), turn.rng, learner=auto.acceptance,
                      curve=auto.draft)
