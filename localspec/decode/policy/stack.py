"""auto's third bet beside "the lookup drafts" and "the draft model drafts": both, in one trie.

Why: in a draft-model phase auto gives an iteration to the lookup when its match is
predicted to beat the draft model's setting, else to the draft model. Where both are often
right (an edit, on a target whose verify curve is flat), the draft model drafts anyway and
the lookup's tokens would cost only their rows in the verify batch: a stack (decode/drafters/combine.py)
keeps the longer of the two right prefixes for that price.

What a stack adds is learned without running one. After every draft-model iteration on
which the history also had a lookup match, its continuation is compared with what the
target emitted: a lookup that matched fewer tokens than were emitted would have added
nothing; one that matched all of them (the target's own token included) would have run
past the draft, by one token plus what the lookup's acceptance predicts for the rest of
its continuation (costmodel/lookup.counterfactual_gain). A stack iteration teaches the
gain it measured: what it emitted beyond the model drafts' own match (exact at T = 0).
auto stacks where the gain learned for this match (proposer, length) buys more than the
lookup's extra verify rows cost on the target's curve, by MARGIN. The decision reads only
earlier iterations, and rrs verifies a stack, so every lossless setting stays exact.

Not where either model keeps a recurrent state (one draft at a time) nor where the context
lacks a sequence or batch room for the extra draft; the MTP head does not stack (a draft
model does).
"""

from __future__ import annotations

from localspec.costmodel.lookup import LookupGate, counterfactual_gain
from localspec.decode.drafters.base import Drafter, Outcome
from localspec.decode.drafters.combine import StackDrafter
from localspec.decode.drafters.trie import DraftTrie
from localspec.decode.speculative import IterationResult, SpecSettings
from localspec.decode.state import common_prefix as common
from localspec.decode.turn import Turn


class AutoStack:
    """The stack auto may run this iteration, and what teaches its gain (see above)."""

    def __init__(self, turn: Turn, lookup: Drafter, proposer: Drafter, gate: LookupGate) -> None:
        self.turn = turn
        self.stack = StackDrafter(lookup, proposer)
        self.model = proposer
        self.gate = gate
        self.start = 0  # committed tokens before the iteration in flight

    @staticmethod
    def possible(turn: Turn, proposer: Drafter | None) -> bool:
        """A stack needs a model drafter that keeps a draft KV (the draft model, not the MTP
        head), and neither model may keep a recurrent state: a stack is two drafts, which one
        state cannot hold (the rule decode/plan.fit_memory applies to --spec-type X+draft)."""
        return (proposer is not None and proposer.draft is not None and turn.draft is not None
                and turn.target.drafts_per_pass > 1 and turn.draft.drafts_per_pass > 1)

    def pays(self, st: SpecSettings, key: tuple, lookup: list[int], predicted: tuple[float, float, float]) -> bool:
        """Whether stacking this lookup onto the draft model's block is predicted to pay."""
        ctx = self.turn.target.ctx
        extra = min(len(lookup), st.L)
        # a sequence for the lookup's draft beside K model drafts and the main one, and
        # every draft's rows (plus the pending token) in one batch
        if st.K + 2 > ctx.n_seq_max or (st.K + 1) * st.L + 2 > ctx.n_batch:
            return False
        cm = self.turn.costs
        assert cm is not None
        _, tokens, seconds = predicted
        return self.gate.stack_pays(cm.target, key, tokens, seconds, 1 + st.K * st.L, extra)

    def begin(self) -> None:
        self.start = len(self.turn.target.committed)

    def emitted(self) -> list[int]:
        """What the iteration in flight committed: its accepted tokens and the target's."""
        return self.turn.target.committed[self.start:]

    def learn_draft(self, key: tuple, lookup: list[int], L: int) -> None:
        """A draft-model iteration with a lookup match beside it: the gain it implies."""
        self.gate.teach_gain(key, counterfactual_gain(lookup[:L], self.emitted(), self.gate.alpha(key)))

    def learn_stack(self, key: tuple, res: IterationResult, trie: DraftTrie) -> None:
        """A stack iteration: its gain over the model drafts' own match; the draft model's
        learners see what its drafts did (at T = 0; at T > 0 only when a model draft won)."""
        emitted = self.emitted()
        d = res.decision
        if trie.sources is None:  # no lookup match at propose time: the model drafted alone
            self.model.learn(Outcome(d.tau, res.drafted, res.confs))
            return
        x = trie.tokens()
        own = [(common([int(t) for t in x[k, : trie.length(k)]], emitted), k) for k in range(1, trie.K)]
        tau_d, k_d = max(own)
        self.gate.teach_gain(key, max(d.tau - tau_d, 0))
        # the lookup's own acceptance, where this iteration shows it (a lookup that matched
        # every emitted token might have matched more: that one is left out)
        lk = [int(t) for t in x[0, : trie.length(0)]]
        tau_l = d.tau if d.k == 0 else common(lk, emitted)
        if d.k == 0 or tau_l < len(emitted):
            self.gate.update(key, tau_l, len(lk))
        if d.k != 0:
            self.model.learn(Outcome(d.tau, res.drafted, res.confs))
        elif self.turn.cfg.sampling.greedy:
            self.model.learn(Outcome(tau_d, trie.length(k_d), trie.conf[k_d]))
