"""`--method auto`: run whatever the cost model predicts fastest, re-checking as we go.

Starts from the cost model's choice; every few iterations the running acceptance estimate
updates the prediction, so a pair that stops agreeing (or a prompt where the draft is
useless) falls back to plain decoding, and AR probes speculation now and then in case the
text became easy again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from localspec.config import LOOKUPS
from localspec.costmodel import CostModel, dynamic_length, length_cap, per_draft_length
from localspec.costmodel.lookup import LOOKUP_MAX_L, LookupGate, hint_length
from localspec.decode.auto_stack import AutoStack
from localspec.decode.autoregressive import ar_step
from localspec.decode.lookup import ChainProposer, LookupProposer
from localspec.decode.mtp import MtpProposer, head_proposer
from localspec.decode.proposer import Proposer
from localspec.decode.speculative import SpecSettings, make_proposer, spec_iteration
from localspec.decode.suffix import SuffixProposer
from localspec.decode.turn import Turn
from localspec.events import Event
from localspec.verify import NumpyRNG

RECHECK_EVERY = 8  # speculative iterations between re-decisions
PROBE_EVERY = 32  # AR tokens between speculative probes (only if speculation could pay)
FIRST_PROBE = 4  # with little evidence about this pair, probe early
AR_CHECKS = 3  # plain steps a cost model may take to see the AR cost live (per session)


def _decide(cm: CostModel, turn: Turn) -> SpecSettings | None:
    best, ar = cm.choose(turn.cfg)
    turn.stats.predicted.append((1.0, 1.0, cm.target(1)) if best is None
                                else (best.tok_per_s / ar, best.expected_tokens, best.seconds))
    if best is None:
        turn.stats.choice_note = (
            f"ar (alpha={cm.acceptance.alpha:.2f}: nothing predicted above {ar:.1f} tok/s); {cm.why_ar()}"
        )
        return None
    if not dynamic_length(turn.cfg, best):
        turn.stats.choice_note = (
            f"{best.method} K={best.K} L={best.L} (alpha={cm.acceptance.alpha:.2f}, predicted "
            f"{best.tok_per_s / ar:.2f}x AR)"
        )
        return SpecSettings(best.method, best.K, best.L)
    # dynamic length: L becomes a cap and the calibrated stop rule ends each draft where one
    # more token stops paying
    cap = length_cap(turn.cfg, best)
    per_draft = per_draft_length(turn.cfg, best)
    turn.stats.choice_note = (
        f"{best.method} K={best.K} L<={cap} dynamic{' per draft' if per_draft else ''} "
        f"(alpha={cm.acceptance.alpha:.2f}, predicted {best.tok_per_s / ar:.2f}x AR at L={best.L})"
    )
    return SpecSettings(best.method, best.K, cap, cm.draft_stop(best, per_draft), per_draft)


def _could_pay(cm: CostModel) -> bool:
    """Whether speculation could beat AR at all here (a near-perfect draft, K = 1, L = 8)."""
    return cm.expected_tokens(1, 8, alpha=0.95) / cm.iteration_seconds(1, 8) > cm.ar()


def _needs_ar(cm: CostModel) -> bool:
    """Whether the AR cost decisions compare with still lacks live evidence (a few checks
    per session at most: a cost model fed no live timings must not turn auto into AR)."""
    return cm.target.needs_samples(1) and cm.ar_checks < AR_CHECKS


def _ran(settings: SpecSettings | None) -> str:
    if settings is None:
        return "ar"
    return f"{settings.method} K={settings.K} L{'<=' if settings.stop is not None else '='}{settings.L}"


Lookup = LookupProposer | SuffixProposer | ChainProposer


class Bet(NamedTuple):
    """The history's lookup match now, as the gate prices it."""

    L: int  # the draft length that pays most alone (0: none beats AR)
    speedup: float  # its predicted speedup over AR
    key: tuple  # (proposer, matched length): what the gate learns per
    tokens: list[int]  # the continuation (up to LOOKUP_MAX_L): a stack's counterfactual, the draft hint


def lookup_bet(turn: Turn, cm: CostModel, lookup: Lookup | None, gate: LookupGate) -> Bet | None:
    """The lookup's bet for the history's match now; None without a match. The gate learns
    per (proposer, match length): an ngram and a suffix match of one length are different bets."""
    if lookup is None:
        return None
    trie = lookup.propose(turn.target.committed, 1, LOOKUP_MAX_L)
    if trie is None:
        return None
    key = (trie.source, lookup.matched)
    L, speedup = gate.best_length(cm.target, key, trie.L)
    return Bet(L, speedup, key, [trie.nodes[i].token for i in trie.path[0]])


def lookup_iteration(turn: Turn, lookup: Lookup, gate: LookupGate, key: tuple, L: int,
                     rng: NumpyRNG) -> list[Event] | None:
    """One lookup draft of L tokens verified, the gate taught what it did."""
    st = SpecSettings("sd" if turn.cfg.sampling.greedy else "gbv", 1, L)
    res = spec_iteration(turn, st, lookup, rng)  # the same continuation, cut to L
    if res is None:
        return None
    if res.drafted:
        gate.update(key, res.decision.tau, res.drafted)
        gate.overhead = 0.9 * gate.overhead + 0.1 * res.overhead_seconds
    return res.events


def lookup_or_ar(turn: Turn, cm: CostModel, lookup: Lookup | None, gate: LookupGate,
                 rng: NumpyRNG) -> list[Event] | None:
    """Where the draft model does not run: a lookup draft when the history has one and the
    gate says it pays (target curve x the lookups' acceptance), else one plain step."""
    bet = lookup_bet(turn, cm, lookup, gate)
    if bet is not None and bet.L:
        assert lookup is not None
        return lookup_iteration(turn, lookup, gate, bet.key, bet.L, rng)
    return ar_step(turn)


def auto_loop(turn: Turn) -> Iterator[Event]:
    """Run the cost model's choice; re-decide every RECHECK_EVERY iterations, probe while AR.

    Where it runs plain decoding (the draft does not pay, or there is no draft), a lookup in
    the turn's own history drafts instead whenever the gate predicts it pays."""
    cm = turn.costs
    assert cm is not None, "auto needs a cost model"
    rng = NumpyRNG(turn.rng)
    # who may draft, in order ("ngram+draft" names both parts); auto stacks them where it
    # pays unless a chain was asked for (--spec-type ngram,draft: one proposer per iteration)
    kinds = turn.cfg.parts
    may_stack = turn.cfg.spec_type is None or turn.cfg.stacked
    # the proposer's dynamic length and the cost model share one acceptance estimate:
    # every verification teaches both
    proposer: Proposer | MtpProposer | None = None
    if "draft" in kinds:
        proposer = (Proposer(turn.draft, turn.cfg.draft_sampling(), turn.rng, learner=cm.acceptance)
                    if turn.draft is not None else head_proposer(turn, cm))  # no draft model: the head
    lookups = tuple(k for k in kinds if k in LOOKUPS)
    lookup = make_proposer(turn, lookups) if lookups else None
    if cm.lookup is None:
        cm.lookup = LookupGate()
    gate = cm.lookup
    # the third bet of a draft-model phase: the lookup's draft beside the model's (auto_stack.py)
    stacks = (AutoStack(turn, lookup, proposer, gate)
              if may_stack and lookup is not None and AutoStack.possible(turn, proposer) else None)
    settings = _decide(cm, turn) if proposer is not None else None
    if proposer is None:  # the runtime's note says why when there is a draft model (still timing)
        why = turn.stats.choice_note or "no draft model"
        turn.stats.choice_note = f"{why}: prompt lookup where it pays, else plain decoding"
    elif turn.draft is None:
        turn.stats.choice_note = f"the target's MTP head drafts (no draft model): {turn.stats.choice_note}"
    ran = [_ran(settings)]
    turn.stats.ran = ran[0]
    turn.stats.ar_estimate = cm.ar()
    since = 0
    while not turn.should_stop():
        wait = FIRST_PROBE if cm.acceptance.trials < 16 else PROBE_EVERY
        # read when a probe is due (the curves heal as the turn runs), not on every iteration
        probe = proposer is not None and settings is None and since >= wait and _could_pay(cm)
        # before re-deciding, make sure the AR cost it compares with was seen live at least
        # a few times (a speculating turn never decodes one token alone, and a cached AR
        # cost that lies would otherwise never be corrected): a few AR steps per session
        check_ar = settings is not None and since >= RECHECK_EVERY and _needs_ar(cm)
        if check_ar:
            cm.ar_checks += 1
        # in a draft-model phase the lookup drafts an iteration whose match is predicted to
        # beat the draft model's setting (decided from the history and earlier verifications,
        # never from this iteration's outcome: every lossless verifier stays exact)
        bet = (lookup_bet(turn, cm, lookup, gate)
               if settings is not None and not check_ar and not probe and turn.stats.predicted else None)
        if bet is not None and bet.L and bet.speedup > turn.stats.predicted[-1][0]:
            assert lookup is not None
            events = lookup_iteration(turn, lookup, gate, bet.key, bet.L, rng)
        elif (settings is not None or probe) and not check_ar:
            assert proposer is not None
            st = settings or SpecSettings("sd" if turn.cfg.sampling.greedy else "gbv", 1, 4)
            stack = (stacks is not None and bet is not None and settings is not None
                     and stacks.pays(st, bet.key, bet.tokens, turn.stats.predicted[-1]))
            if stacks is not None:
                stacks.begin()
            if bet is not None and not stack and turn.cfg.draft_hint and isinstance(proposer, Proposer):
                # the draft model drafts; the lookup's continuation pre-evaluates what it likely
                # drafts (propose ignores it where it cannot: K > 1, a recurrent draft)
                proposer.hint = bet.tokens[: hint_length(gate.alpha(bet.key), cm.draft, st.L - 1)]
            res = spec_iteration(turn, st, stacks.stack if stack else proposer, rng)  # type: ignore[union-attr]
            events = None
            if res is not None:
                if stack:
                    assert stacks is not None and bet is not None and stacks.stack.last is not None
                    stacks.learn_stack(bet.key, res, stacks.stack.last)
                else:
                    proposer.observe(res.decision.tau, res.drafted, res.confs)
                    if stacks is not None and bet is not None:
                        stacks.learn_draft(bet.key, bet.tokens, st.L)
                cm.overhead = 0.9 * cm.overhead + 0.1 * res.overhead_seconds
                events = res.events
        else:
            events = lookup_or_ar(turn, cm, lookup, gate, rng) if not check_ar else ar_step(turn)
        if events is None:
            turn.emitter.close("context_full")
            return
        since += 1
        if (settings is not None and since >= RECHECK_EVERY and not _needs_ar(cm)) or probe:
            settings = _decide(cm, turn)
            since = 0
            now = _ran(settings)
            if now != ran[-1]:
                ran.append(now)
                turn.stats.ran = " then ".join(ran[:3]) + (" ..." if len(ran) > 3 else "")
        turn.stats.ar_estimate = cm.ar()  # the curves heal as the turn runs
        for source in turn.stats.proposed:
            if source not in turn.stats.ran:
                turn.stats.ran += " by the MTP head" if source == "mtp" else f" + {source} lookups"
        if turn.stats.stacked and "stacks" not in turn.stats.ran:
            turn.stats.ran += " + stacks"
        yield from events
        yield turn.tick()
