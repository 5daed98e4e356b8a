"""`--method auto`: run whatever the cost model predicts fastest, re-checking as we go.

Starts from the cost model's choice; every few iterations the running acceptance estimate
updates the prediction, so a pair that stops agreeing (or a prompt where the draft is
useless) falls back to plain decoding, and AR probes speculation now and then in case the
text became easy again -- or the machine quiet again: a probe is decided on the quiet
machine's prices, and a contended cost model probes early in each turn (FIRST_PROBE, then
backing off), so the draft's own samples can end a contention its price still shows
(costmodel/curves.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from localspec.config import one_draft_verifier
from localspec.costmodel import CostModel, dynamic_length, forecast, length_cap, per_draft_length
from localspec.costmodel.lookup import (
    LOOKUP_LONG_L,
    LOOKUP_MAX_L,
    LookupGate,
    gate_key,
    hint_length,
    lookup_limit,
)
from localspec.decode.drafters import registry
from localspec.decode.drafters.base import Drafter, DraftRequest, Outcome
from localspec.decode.drafters.trie import GRAMMAR, PREDICTION
from localspec.decode.policy.stack import AutoStack
from localspec.decode.speculative import (
    IterationPlan,
    IterationResult,
    SpecSettings,
    drive,
    make_drafter,
)
from localspec.decode.state import common_prefix
from localspec.decode.turn import Turn
from localspec.events import Event

RECHECK_EVERY = 8  # speculative iterations between re-decisions
PROBE_EVERY = 32  # AR tokens between speculative probes (only if speculation could pay)
FIRST_PROBE = 4  # with little evidence about this pair, probe early
# a probe of a contended model: 2 drafted tokens, the fewest whose draft decodes a token
# alone (a live sample of its 1-token price); a busy machine's draft step was 1.4 s (issue 40)
RETEST_L = 2
AR_CHECKS = 3  # plain steps a cost model may take to see the AR cost live (per session)
# in a draft-model phase a lookup is priced on the gate's estimate, without its exploration
# bonus: the alternative is a draft that is right ~90 % of the time, and exploring there lost
# iterations to JSON lookups right 34 % of the time (F16 pair, tune halves, stop 46:
# structured 1.32x -> 1.41x AR, edit 2.19x -> 2.28x); AR phases still explore, and the
# shipped priors keep the lengths that copy (docs/performance.md#priors)
MODEL_PHASE_EXPLORE = False


def catch_up(cm: CostModel, turn: Turn) -> tuple[int, float]:
    """(prompt tokens the draft model has not evaluated, the seconds it would take).

    A draft model drafts only once its context holds the whole history, so its first
    iteration evaluates the prompt's uncached part first. For a chat turn that is the new
    message; for an editor's completion (a 2,000-token FIM prompt, a 10-80 token answer) it
    can cost more than speculation saves on the whole answer. Priced at the draft curve's
    largest timed batch per token (larger prompt batches are a little cheaper: an upper bound)."""
    d = turn.draft
    if d is None:
        return 0, 0.0
    history = turn.target.committed
    behind = len(history) - common_prefix(d.tokens, history)
    big = max(1, cm.draft.sizes[-1])
    return behind, behind * cm.draft(big) / big


def _catch_up_pays(cm: CostModel, turn: Turn, tok_per_s: float) -> bool:
    """Whether what speculating at `tok_per_s` saves over AR on the answer's remaining
    tokens (its token budget: an upper bound) exceeds the draft's catch-up."""
    behind, seconds = catch_up(cm, turn)
    if behind <= 0 or tok_per_s <= cm.ar():
        return True
    saving = turn.emitter.remaining * (1.0 / cm.ar() - 1.0 / tok_per_s)
    return saving > seconds


def _decide(cm: CostModel, turn: Turn) -> SpecSettings | None:
    best, ar = cm.choose(turn.cfg)
    if best is not None and not _catch_up_pays(cm, turn, best.tok_per_s):
        behind, seconds = catch_up(cm, turn)
        turn.stats.predicted.append((1.0, 1.0, cm.target(1)))
        turn.stats.choice_note = (f"ar: the draft model has {behind} prompt tokens to evaluate first "
                                  f"(~{seconds:.2f} s), more than speculating saves on at most "
                                  f"{turn.emitter.remaining} tokens")
        return None
    turn.stats.predicted.append((1.0, 1.0, cm.target(1)) if best is None
                                else (best.tok_per_s / ar, best.expected_tokens, best.seconds))
    turn.stats.prices = prices = cm.prices()
    priced = f"; prices: {prices}" if prices else ""
    if best is None:
        turn.stats.choice_note = (
            f"ar (alpha={cm.acceptance.alpha:.2f}: nothing predicted above {ar:.1f} tok/s){priced}; {cm.why_ar()}"
        )
        return None
    if not dynamic_length(turn.cfg, best):
        turn.stats.choice_note = (
            f"{best.method} K={best.K} L={best.L} (alpha={cm.acceptance.alpha:.2f}, predicted "
            f"{best.tok_per_s / ar:.2f}x AR){priced}"
        )
        return SpecSettings(best.method, best.K, best.L)
    # dynamic length: L becomes a cap and the calibrated stop rule ends each draft where one
    # more token stops paying
    cap = length_cap(turn.cfg, best)
    per_draft = per_draft_length(turn.cfg, best)
    turn.stats.choice_note = (
        f"{best.method} K={best.K} L<={cap} dynamic{' per draft' if per_draft else ''} "
        f"(alpha={cm.acceptance.alpha:.2f}, predicted {best.tok_per_s / ar:.2f}x AR at L={best.L}){priced}"
    )
    return SpecSettings(best.method, best.K, cap, cm.draft_stop(best, per_draft, turn.cfg.draft_lookahead), per_draft)


def _could_pay(cm: CostModel, turn: Turn | None = None) -> bool:
    """Whether speculation could beat AR at all here (a near-perfect draft, K = 1, L = 8), at
    the quiet machine's prices, the draft's catch-up on the prompt included: a draft priced
    out by a busy minute is still probed, and only its own live samples end the contention
    (auto never ran a draft whose price a busy minute had raised 59x, so nothing lowered it:
    issue 40). Without a turn, the catch-up is left out (the prices alone)."""
    q = cm.quiet() if cm.contended else cm
    rate = q.expected_tokens(1, 8, alpha=0.95) / q.iteration_seconds(1, 8)
    return rate > q.ar() and (turn is None or _catch_up_pays(q, turn, rate))


def _needs_ar(cm: CostModel) -> bool:
    """Whether the AR cost decisions compare with still lacks live evidence (a few checks
    per session at most: a cost model fed no live timings must not turn auto into AR)."""
    return cm.target.needs_samples(1) and cm.ar_checks < AR_CHECKS


def _ran(settings: SpecSettings | None) -> str:
    if settings is None:
        return "ar"
    return f"{settings.method} K={settings.K} L{'<=' if settings.stop is not None else '='}{settings.L}"


class Bet(NamedTuple):
    """The history's lookup match now, as the gate prices it."""

    L: int  # the draft length that pays most alone (0: none beats AR)
    speedup: float  # its predicted speedup over AR
    key: tuple  # (proposer, matched length[, origin]): what the gate learns per (gate_key)
    tokens: list[int]  # the continuation (up to LOOKUP_MAX_L): a stack's counterfactual, the draft hint


def lookup_bet(turn: Turn, cm: CostModel, lookup: Drafter | None, gate: LookupGate, explore: bool = True) -> Bet | None:
    """The lookup's bet for the history's match now; None without a match. The gate learns
    per (proposer, match length): an ngram and a suffix match of one length are different bets.
    A prompt match and an answer match are different bets too (drafters/lookup.py's origin).
    `explore`: price it on the gate's optimistic alpha (else its estimate)."""
    if lookup is None:
        return None
    trie = lookup.propose(DraftRequest(turn.target.committed, 1, LOOKUP_LONG_L))
    if trie is None:
        return None
    key = gate_key(trie.source, lookup.matched, lookup.origin, lookup.run)
    L, speedup = gate.best_length(cm.target, key, min(trie.L, lookup_limit(lookup.run)), explore=explore)
    return Bet(L, speedup, key, [trie.nodes[i].token for i in trie.path[0][:LOOKUP_MAX_L]])


class AutoPolicy:
    """`auto` as a policy (decode/speculative.Policy): `next` picks the iteration (a lookup
    draft, the model drafter's setting, a stack of both, an AR probe, an AR cost check or
    one plain step), `learn` teaches the gate, the acceptance estimate and the stack's gain
    from its result and re-decides every RECHECK_EVERY iterations.

    Every choice reads the history and earlier verifications, never the iteration's own
    outcome, so every lossless verifier stays exact. It needs no model: the turn, the cost
    model and the drafters are all it reads (tests/test_auto_policy.py drives it with
    recorded outcomes)."""

    def __init__(self, turn: Turn, cm: CostModel, model: Drafter | None, lookup: Drafter | None,
                 stacks: AutoStack | None) -> None:
        self.turn, self.cm, self.model, self.lookup, self.stacks = turn, cm, model, lookup, stacks
        if cm.lookup is None:
            cm.lookup = LookupGate()
        self.gate: LookupGate = cm.lookup
        self.settings = _decide(cm, turn) if model is not None else None
        self.ran = [_ran(self.settings)]
        self.since = 0  # iterations since the last decision
        self.probe = False  # the plan in flight is an AR-phase probe of the model drafter
        self.retests = 0  # probes of a contended cost model this turn (each waits twice as long)
        self.grammar = registry.build(GRAMMAR, turn, cm)  # a constrained turn's forced tokens

    def next(self) -> IterationPlan:
        turn, cm, settings = self.turn, self.cm, self.settings
        if self.grammar is not None:  # forced tokens: p = 1 under the mask, never rejected, always pay
            forced = turn.constraint.matcher.forced(LOOKUP_MAX_L)
            if forced:
                st = SpecSettings(one_draft_verifier(turn.cfg.sampling.greedy), 1, len(forced))
                return IterationPlan(st, self.grammar, GRAMMAR)
        # read when a probe is due (the curves heal as the turn runs), not on every iteration
        self.probe = probe = (self.model is not None and settings is None and self.since >= self._wait()
                              and _could_pay(cm, turn))
        retest = probe and cm.contended
        self.retests += int(retest)
        # before re-deciding, make sure the AR cost it compares with was seen live at least
        # a few times (a speculating turn never decodes one token alone, and a cached AR
        # cost that lies would otherwise never be corrected): a few AR steps per session
        if settings is not None and self.since >= RECHECK_EVERY and _needs_ar(cm):
            cm.ar_checks += 1
            return IterationPlan(None, role="check")
        # in a model phase the lookup drafts an iteration whose match is predicted to beat
        # the model drafter's setting
        bet = (lookup_bet(turn, cm, self.lookup, self.gate, explore=MODEL_PHASE_EXPLORE)
               if settings is not None and not probe and turn.stats.predicted else None)
        if bet is not None and bet.L and bet.speedup > turn.stats.predicted[-1][0]:
            return self._lookup_plan(bet)
        if settings is None and not probe:  # no model phase: a lookup where it pays, else AR
            bet = lookup_bet(turn, cm, self.lookup, self.gate)
            return self._lookup_plan(bet) if bet is not None and bet.L else IterationPlan(None, role="ar")
        assert self.model is not None
        st = settings or SpecSettings(one_draft_verifier(turn.cfg.sampling.greedy), 1, RETEST_L if retest else 4)
        stacks = self.stacks
        if stacks is not None:
            stacks.begin()
        if (stacks is not None and bet is not None and settings is not None
                and stacks.pays(st, bet.key, bet.tokens, turn.stats.predicted[-1])):
            return IterationPlan(st, stacks.stack, "stack", bet)
        if bet is not None and turn.cfg.draft_hint and hasattr(self.model, "hint"):
            # the draft model drafts; the lookup's continuation pre-evaluates what it likely
            # drafts (propose ignores it where it cannot: K > 1, a recurrent draft)
            self.model.hint = bet.tokens[: hint_length(self.gate.alpha(bet.key), cm.draft, st.L - 1)]  # type: ignore[attr-defined]
        return IterationPlan(st, self.model, "model", bet)

    def _wait(self) -> int:
        """Plain steps before the next probe. A contended cost model is re-tested after
        FIRST_PROBE steps, then after PROBE_EVERY x 1, 2, 4 ... (a machine still busy pays a
        few draft steps per turn, log2 of its length); else FIRST_PROBE while the pair has
        little evidence, PROBE_EVERY after."""
        if self.cm.contended:
            return FIRST_PROBE if self.retests == 0 else PROBE_EVERY * 2 ** (self.retests - 1)
        return FIRST_PROBE if self.cm.acceptance.trials < 16 else PROBE_EVERY

    def _lookup_plan(self, bet: Bet) -> IterationPlan:
        """A lookup draft of the bet's length, verified by the one-draft verifier."""
        st = SpecSettings(one_draft_verifier(self.turn.cfg.sampling.greedy), 1, bet.L)
        return IterationPlan(st, self.lookup, "lookup", bet)

    def _forecast(self, plan: IterationPlan, res: IterationResult | None) -> None:
        """Add what the estimates expected of this iteration (before `learn` teaches them
        its outcome) to the turn's forecast (costmodel/forecast.py)."""
        cm, bet = self.cm, plan.bet
        if res is None or not res.drafted:  # the target wrote one token alone
            tokens, seconds = 1.0, cm.target(1)
        else:
            K = plan.settings.K if plan.settings is not None else 1
            probs: list[float] = []
            if plan.role == "lookup" and isinstance(bet, Bet):
                probs = [self.gate.alpha(bet.key)] * res.drafted
                tokens = forecast.chain_tokens(probs)
            elif plan.role == "stack" and isinstance(bet, Bet) and self.turn.stats.predicted:
                tokens = self.turn.stats.predicted[-1][1] + self.gate.stack_gain(bet.key)
            elif plan.role == "model":
                probs = forecast.model_probs(cm, K, res.confs, res.drafted)
                tokens = forecast.model_tokens(cm, K, res.confs, res.drafted)
            else:  # the grammar's forced tokens: never rejected
                probs, tokens = [1.0] * res.drafted, res.drafted + 1.0
            overhead = self.gate.overhead if plan.role == "lookup" else cm.overhead
            seconds = forecast.iteration_seconds(cm, res.rows, res.draft_calls, K, overhead,
                                                 res.drafted, probs, tokens)
        forecast.add(self.turn.stats.forecast, tokens, seconds)

    def learn(self, plan: IterationPlan, res: IterationResult | None) -> None:
        self._forecast(plan, res)
        cm, gate, bet = self.cm, self.gate, plan.bet
        if plan.role == "lookup" and res is not None and res.drafted:
            assert isinstance(bet, Bet)
            gate.update(bet.key, res.decision.tau, res.drafted)
            gate.overhead = 0.9 * gate.overhead + 0.1 * res.overhead_seconds
        elif plan.role in ("model", "stack") and res is not None:
            if plan.role == "stack":
                assert self.stacks is not None and isinstance(bet, Bet) and self.stacks.stack.last is not None
                self.stacks.learn_stack(bet.key, res, self.stacks.stack.last)
            else:
                assert self.model is not None and plan.settings is not None
                self.model.learn(Outcome(res.decision.tau, res.drafted, res.confs))
                if self.stacks is not None and isinstance(bet, Bet):
                    self.stacks.learn_draft(bet.key, bet.tokens, plan.settings.L)
            cm.overhead = 0.9 * cm.overhead + 0.1 * res.overhead_seconds
        self.since += 1
        if self.turn.emitter.done is not None:  # the budget spent, an end token, a stop word
            self._say()  # the turn is over: a decision now would only rewrite its note
            return
        if (self.settings is not None and self.since >= RECHECK_EVERY and not _needs_ar(cm)) or self.probe:
            self.settings = _decide(cm, self.turn)
            self.since = 0
            now = _ran(self.settings)
            if now != self.ran[-1]:
                self.ran.append(now)
                self.turn.stats.ran = " then ".join(self.ran[:3]) + (" ..." if len(self.ran) > 3 else "")
        self._say()

    def _say(self) -> None:
        """The stats line's account of who drafted (the curves heal as the turn runs)."""
        stats = self.turn.stats
        stats.ar_estimate = self.cm.ar()
        for source in stats.proposed:
            if source not in stats.ran:
                stats.ran += (f" + {source} lookups" if registry.is_lookup(source)
                              else f" by {registry.spec(source).summary if source in registry.names() else source}")
        if stats.stacked and "stacks" not in stats.ran:
            stats.ran += " + stacks"


def auto_policy(turn: Turn) -> AutoPolicy:
    """The drafters auto may use this turn, from the registry, and the policy over them."""
    cm = turn.costs
    assert cm is not None, "auto needs a cost model"
    # who may draft, in order ("ngram+draft" names both parts); auto stacks them where it
    # pays unless a chain was asked for (--spec-type ngram,draft: one drafter per iteration)
    kinds = turn.cfg.parts
    may_stack = turn.cfg.spec_type is None or turn.cfg.stacked
    # the model drafter's dynamic length and the cost model share one acceptance estimate:
    # every verification teaches both. Where the draft model is named but absent, a drafter
    # that stands in for it (the target's MTP head) drafts, if the session has one
    model: Drafter | None = None
    models = [k for k in kinds if k in registry.models()]
    if "draft" in models and turn.draft is None:
        models += [k for k in registry.stand_ins() if k not in models]
    for name in models:
        model = registry.build(name, turn, cm)
        if model is not None:
            break
    lookups = tuple(k for k in kinds if registry.is_lookup(k))
    if turn.cfg.prediction and PREDICTION not in lookups:
        lookups = (PREDICTION, *lookups)  # the client's prediction first (drafters/prediction.py)
    lookup = make_drafter(turn, lookups) if lookups else None
    if cm.lookup is None:
        cm.lookup = LookupGate()
    # the third bet of a model phase: the lookup's draft beside the model's (stack.py)
    stacks = (AutoStack(turn, lookup, model, cm.lookup)  # type: ignore[arg-type]
              if may_stack and lookup is not None and AutoStack.possible(turn, model) else None)
    policy = AutoPolicy(turn, cm, model, lookup, stacks)
    if policy.settings is not None and model is not None:
        turn.prefill_draft(model)  # a model phase from the start: the draft's prompt is prompt time
    if model is None:  # the runtime's note says why when there is a draft model (still timing)
        why = turn.stats.choice_note or "no draft model"
        turn.stats.choice_note = f"{why}: prompt lookup where it pays, else plain decoding"
    elif model.name != "draft":
        what = registry.spec(model.name).summary
        turn.stats.choice_note = f"{what} drafts (no draft model): {turn.stats.choice_note}"
    turn.stats.ran = policy.ran[0]
    turn.stats.ar_estimate = cm.ar()
    return policy


def auto_loop(turn: Turn) -> Iterator[Event]:
    """Run the cost model's choice; re-decide every RECHECK_EVERY iterations, probe while AR.

    Where it runs plain decoding (the draft does not pay, or there is no draft), a lookup in
    the turn's own history drafts instead whenever the gate predicts it pays."""
    yield from drive(turn, auto_policy(turn))
