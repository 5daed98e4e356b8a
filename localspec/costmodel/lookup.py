"""When a lookup draft pays: the target's measured batch curve x the lookups' own acceptance.

A lookup draft (decode/drafters/lookup.py) costs no model call, but verifying L looked-up tokens
costs a target decode of 1 + L tokens instead of 1. With a chance alpha that each next
token is accepted, one verification emits E = 1 + alpha + ... + alpha^L tokens, so L tokens
pay when E / (target(1 + L) + overhead) beats 1 / target(1) by MARGIN. alpha is learned per
matched length, per proposer (a 6-token match is a better bet than a 2-token one, a suffix
match with counts behind it another bet than an n-gram's latest copy), from every
verification, starting from a prior that tries a lookup a few times before trusting it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from localspec.costmodel import priors
from localspec.costmodel.curves import CostCurve
from localspec.costmodel.predict import MARGIN

PRIOR_ACCEPTED, PRIOR_TRIALS = 1.0, 2.0  # alpha 0.5 before any evidence (a key the shipped priors lack)
# optimism while a match length has little evidence (an upper confidence bound): a gate that
# starts at alpha 0.5 on a CPU where verifying 8 tokens costs 4.5x one would never try a
# lookup and so never learn that long matches are right 90 % of the time
EXPLORE = 0.4
# the longest lookup draft auto asks for (the gate picks the length that pays most); here,
# not in decode/policy/auto.py, so --explain prices what auto would draft with the same bound
LOOKUP_MAX_L = 16
# ... and for a match inside a long copy: its source agrees with the history LONG_RUN tokens
# back or more (drafters/lookup.agreement). The gate's acceptance is one alpha per position
# (geometric), fitted on positions up to 16 deep; inside a copy the far positions are right
# far more often than that predicts (the tuning half: 2-token prompt matches right 69 % at
# depth 1, 96-99 % from depth 8 on). A CPU verifies 32 tokens for ~15 steps' price (Q4_K_M
# 1.5B, 2 threads: 16 tokens 282 ms, 32 tokens 466 ms, one 32 ms), so a long copy's long bet
# pays; llama.cpp's ngram-simple drafts 48 after a 12-token match. 31 drafted + 1 = a batch
# of 32, a size the cost curve times (docs/performance.md#long-copies).
LONG_RUN = 12
LOOKUP_LONG_L = 31


def lookup_limit(run: int) -> int:
    """The longest lookup draft the gate may price for a match whose source agrees `run` tokens back."""
    return LOOKUP_LONG_L if run >= LONG_RUN else LOOKUP_MAX_L
# a stack's gain starts at 0 tokens with this weight: auto stacks only once draft-model
# iterations showed the lookup running past the draft (they teach it for free: decode/policy/stack.py)
GAIN_PRIOR_TRIALS = 2.0


LONG = priors.LONG  # a gate key's mark for a match inside a long copy (run >= LONG_RUN)


def gate_key(source: str, matched: int, origin: str = "", run: int = 0) -> tuple:
    """What the gate learns per: (proposer, match length), where the continuation was found
    when the proposer tells (a prompt match and an answer match are different bets), and
    whether the match sits inside a long copy (its source agrees LONG_RUN tokens back or more).

    Why the copy's length: an 8-token match 8 tokens into an agreement is another bet than
    one 30 tokens into it. On the edit tuning half one rejected bet at run 8 (2 of 15) took
    the 8-token key's estimate from 0.98 to 0.89, and the matches after it, 26 and 32 tokens
    into the copy, bet 5 tokens where they bet 31 before (docs/performance.md#long-key)."""
    return (source, matched, *((origin,) if origin else ()), *((LONG,) if run >= LONG_RUN else ()))


@dataclass
class LookupGate:
    """Per key -- gate_key: (proposer, matched length[, origin]) --: accepted / reached draft
    positions (Beta counts), on top of a prior per key: the shipped one (costmodel/priors.py,
    fitted on the bench's tuning halves) where there is one, else alpha 0.5 on 2 trials."""

    prior: dict[Hashable, tuple[float, float]] = field(default_factory=priors.lookup_priors)
    # per key: positions a shipped prior was fitted on (its exploration bonus shrinks with them)
    evidence: dict[Hashable, float] = field(default_factory=priors.lookup_evidence)
    accepted: dict[Hashable, float] = field(default_factory=dict)
    trials: dict[Hashable, float] = field(default_factory=dict)
    overhead: float = 0.001  # Python work of a lookup iteration (seconds), updated live
    # per key: tokens a stack (the lookup's draft beside the draft model's) emitted beyond
    # the draft model's alone, summed over the iterations that measured or implied it
    gain: dict[Hashable, float] = field(default_factory=dict)
    gain_trials: dict[Hashable, float] = field(default_factory=dict)

    def alpha(self, n: Hashable) -> float:
        """The estimate for key n (the posterior mean)."""
        pa, pt = self.prior.get(n, (PRIOR_ACCEPTED, PRIOR_TRIALS))
        return (pa + self.accepted.get(n, 0.0)) / (pt + self.trials.get(n, 0.0))

    def optimistic_alpha(self, n: Hashable) -> float:
        """What the gate bets on: the estimate plus a bonus that shrinks with the evidence:
        the positions a shipped prior was fitted on (`evidence`), else a given prior's trials
        beyond the uninformed one's 2, and this session's own. Before stop 48 a shipped prior
        counted as its 6 pseudo-trials only, a bonus of 0.18 that made the gate bet 15 tokens
        on 2-token prompt matches right 89 % of the time: a loss on the bench's chat and code
        tuning answers (docs/performance.md#origin)."""
        seen = self.evidence.get(n) if n in self.prior else None
        if seen is None:
            seen = max(self.prior.get(n, (0.0, PRIOR_TRIALS))[1] - PRIOR_TRIALS, 0.0)
        return min(0.98, self.alpha(n) + EXPLORE / (1.0 + seen + self.trials.get(n, 0.0)) ** 0.5)

    def update(self, n: Hashable, tau: int, L: int) -> None:
        """A verification of an L-token lookup (key n) accepted tau tokens."""
        self.accepted[n] = self.accepted.get(n, 0.0) + tau
        self.trials[n] = self.trials.get(n, 0.0) + min(tau + 1, L)

    def best_length(self, target: CostCurve, n: Hashable, available: int, *, explore: bool = True) -> tuple[int, float]:
        """(draft length that pays most, its predicted speedup over AR); (0, 1.0) when no
        length beats AR by MARGIN. `explore`: bet on the optimistic alpha (else the estimate)."""
        a, ar = (self.optimistic_alpha(n) if explore else self.alpha(n)), 1.0 / target(1)
        best, best_rate = 0, 0.0
        e = 1.0
        for L in range(1, available + 1):
            e += a**L
            rate = e / (target(1 + L) + self.overhead)
            if rate > best_rate:
                best, best_rate = L, rate
        if best_rate <= MARGIN * ar:
            return 0, 1.0
        return best, best_rate / ar

    def stack_gain(self, n: Hashable) -> float:
        """Tokens per iteration a stack is expected to add to the draft model's (key n)."""
        return self.gain.get(n, 0.0) / (GAIN_PRIOR_TRIALS + self.gain_trials.get(n, 0.0))

    def teach_gain(self, n: Hashable, gained: float) -> None:
        self.gain[n] = self.gain.get(n, 0.0) + gained
        self.gain_trials[n] = self.gain_trials.get(n, 0.0) + 1.0

    def stack_pays(self, target: CostCurve, n: Hashable, tokens: float, seconds: float, block: int,
                   extra: int) -> bool:
        """Whether adding `extra` looked-up tokens to a draft-model block of `block` tokens
        (predicted: `tokens` emitted per iteration in `seconds`) beats the block alone by
        MARGIN: the learned gain against what the extra verify rows cost on the curve."""
        if extra < 1 or seconds <= 0.0:
            return False
        g = self.stack_gain(n)
        if g <= 0.0:
            return False
        cost = max(target(block + extra) - target(block), 0.0)
        return (tokens + g) / (seconds + cost) > MARGIN * tokens / seconds


def counterfactual_gain(lookup: list[int], emitted: list[int], alpha: float) -> float:
    """What stacking `lookup` would have added to a draft-model iteration that emitted
    `emitted` (its accepted tokens and the target's own): nothing unless the lookup matched
    every emitted token; then it would have run past the draft, by one token plus what its
    acceptance predicts for the rest of its continuation."""
    n = len(emitted)
    if len(lookup) < n or lookup[:n] != emitted:
        return 0.0
    return 1.0 + sum(alpha**j for j in range(1, len(lookup) - n + 1))


def hint_length(alpha: float, draft: CostCurve, longest: int, pending: int = 1) -> int:
    """How many of a lookup's tokens the draft model should evaluate in its first decode
    (decode/drafters/model.propose's hint), 0 for none: the length whose expected saved draft
    decodes (depth i's decode is saved when the draft's first i tokens are the lookup's,
    about alpha^i: the draft agrees with the target where the lookup does) outweigh the
    rows it adds to that decode, on the draft's measured curve."""
    step, base = draft(1), draft(pending)
    best, best_gain, saved = 0, 0.0, 0.0
    for m in range(1, longest + 1):
        saved += alpha**m * step
        gain = saved - (draft(pending + m) - base)
        if gain > best_gain:
            best, best_gain = m, gain
    return best
