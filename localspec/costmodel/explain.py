"""What `--explain` prints: the cost model's predictions, its choice and the calibration."""

from __future__ import annotations

from localspec.config import GenConfig
from localspec.costmodel import priors
from localspec.costmodel.acceptance import N_BINS, Acceptance
from localspec.costmodel.curves import CostCurve
from localspec.costmodel.lookup import LONG_RUN, LOOKUP_LONG_L, LOOKUP_MAX_L, LookupGate
from localspec.costmodel.predict import CostModel, dynamic_length, length_cap, per_draft_length
from localspec.decode.drafters import registry


def explain(cm: CostModel | None, cfg: GenConfig, costs: CostModel | None = None) -> str:
    """A table of predictions and the choice, for --explain (cm None: there is no draft),
    then the lookups' own prediction per proposer. `costs` is the session's cost model, which
    holds what the lookup gate learned (cm, when there is a draft; without one, the
    target-only model of an earlier turn, or None before any)."""
    return "\n".join(_draft_lines(cm, cfg) + lookup_lines(costs or cm, cfg))


def _draft_lines(cm: CostModel | None, cfg: GenConfig) -> list[str]:
    """The draft model's part: its prediction table and the choice."""
    if cm is None:
        return ["no draft model: prompt lookups in the turn's own text where they pay (the target's "
                "curve x their acceptance), else plain autoregressive decoding"]
    best, ar = cm.choose(cfg)
    lines = [
        f"cost model (alpha={cm.acceptance.alpha:.2f}; prices measured on this machine: target 1 tok "
        f"{cm.target(1) * 1e3:.1f} ms, 16 tok {cm.target(16) * 1e3:.1f} ms; draft step {cm.draft(1) * 1e3:.1f} ms)",
        *([f"prices: {cm.prices()}"] if cm.prices() else []),
        "every row is a prediction (the prices x the acceptance), not a measurement:",
        f"{'method':8} {'K':>2} {'L':>3} {'E[tokens]':>9} {'ms/iter':>8} {'tok/s':>7} {'vs AR':>6}",
        f"{'ar':8} {1:>2} {0:>3} {1.0:>9.2f} {cm.target(1) * 1e3:>8.1f} {ar:>7.1f} {1.0:>6.2f}",
    ]
    cands = sorted(cm.candidates(cfg), key=lambda p: -p.tok_per_s)[:12]
    for p in cands:
        lines.append(
            f"{p.method:8} {p.K:>2} {p.L:>3} {p.expected_tokens:>9.2f} {p.seconds * 1e3:>8.1f} "
            f"{p.tok_per_s:>7.1f} {p.tok_per_s / ar:>6.2f}"
        )
    if best is None:
        lines.append("choice: ar (no speculative setting is predicted to beat plain decoding by 5 %)")
    else:
        lines.append(f"choice: {best.method} K={best.K} L={best.L} (predicted {best.tok_per_s / ar:.2f}x AR)")
        if dynamic_length(cfg, best):
            lines.append(_calibration_line(cm.acceptance, length_cap(cfg, best), per_draft_length(cfg, best)))
    return lines


def lookup_lines(costs: CostModel | None, cfg: GenConfig) -> list[str]:
    """Per lookup proposer --spec-type names: under auto, what its gate learned per matched
    length (the estimate, what it bets, the counts behind them) and the draft length that
    pays most with its predicted speedup over AR on the target's curve; with no evidence
    yet, the prior it starts from. Other methods do not gate lookups: said in one line."""
    kinds = [k for k in cfg.parts if registry.is_lookup(k)]
    if not kinds:
        return []
    names = ", ".join(kinds)
    if cfg.method != "auto":
        return [f"lookups ({names}): draft whenever the history has a match, up to L={cfg.L} "
                f"(only --method auto prices them)"]
    gate = costs.lookup if costs is not None and isinstance(costs.lookup, LookupGate) else None
    target = costs.target if costs is not None else None
    lines = [f"lookups ({names}): auto drafts by lookup where the draft model does not run, at the length the "
             "gate prices best (acceptance learned per proposer and match length, this session)"]
    for kind in kinds:
        shown = gate or LookupGate()  # before any evidence: the shipped priors (costmodel/priors.py)
        keys = sorted({n for n in (*shown.trials, *shown.prior) if isinstance(n, tuple) and n[0] == kind},
                      key=lambda n: (n[1], n[2:]))
        if not keys:
            prior = shown
            line = (f"  {kind}: no lookup evidence yet: every match length starts at alpha "
                    f"{prior.alpha((kind, 0)):.2f}, bet at {prior.optimistic_alpha((kind, 0)):.2f}")
            if target is not None:
                line += " -> " + _drafts(prior, target, (kind, 0))
            lines.append(line)
            lines += _stack_line(gate, kind)
            continue
        lines.append(f"  {kind:7} {'match':>5} {'found in':>8} {'alpha':>5} {'bet':>5} {'accepted/reached':>17}  drafts")
        for key in keys:
            counts = f"{shown.accepted[key]:.0f}/{shown.trials[key]:.0f}" if key in shown.trials else "shipped prior"
            where = key[2] if len(key) > 2 else "-"
            lines.append(f"  {'':7} {key[1]:>5} {where:>8} {shown.alpha(key):>5.2f} {shown.optimistic_alpha(key):>5.2f} "
                         f"{counts:>17}  " + (_drafts(shown, target, key) if target is not None else "(no target curve yet)"))
        lines += _stack_line(gate, kind)
    return lines


def _stack_line(gate: LookupGate | None, kind: str) -> list[str]:
    """What auto learned a stack of this lookup adds beside the draft model, per match
    length (decode/policy/stack.py); nothing before a draft-model iteration taught it."""
    gains = sorted((n for n in (gate.gain if gate else {}) if n[0] == kind), key=lambda n: (n[1], n[2:]))
    if not gains:
        return []
    assert gate is not None
    return [f"  {kind} stacked beside the draft model, tokens it adds per iteration (learned): "
            + ", ".join(f"{key_words(n)}: +{gate.stack_gain(n):.2f} (n={gate.gain_trials[n]:.0f})" for n in gains)]


def key_words(n: tuple) -> str:
    """A gate key in words: ('ngram', 8, 'prompt', 'long') -> "match 8 in the prompt inside a
    long copy" (before, "match 8 in the prompt in the long")."""
    where = [f"in the {p}" for p in n[2:] if p != priors.LONG]
    return " ".join([f"match {n[1]}", *where, *(["inside a long copy"] if priors.LONG in n[2:] else [])])


def _drafts(gate: LookupGate, target: CostCurve, key: tuple) -> str:
    """What the gate would draft for a match of this key, and the speedup it predicts."""
    L, gain = gate.best_length(target, key, LOOKUP_MAX_L)
    if not L:
        return "none (no length beats AR)"
    long_L, long_gain = gate.best_length(target, key, LOOKUP_LONG_L)
    inside = (f"; inside a copy of {LONG_RUN}+ tokens L={long_L} ({long_gain:.2f}x)"
              if long_L > LOOKUP_MAX_L else "")
    return f"L={L} (predicted {gain:.2f}x AR per lookup iteration{inside})"



def _calibration_line(a: Acceptance, cap: int, per_draft: bool = False) -> str:
    """The dynamic length's view of the draft: acceptance per confidence bin (and evidence)."""
    cells = [
        f"{b / N_BINS:.1f}-{(b + 1) / N_BINS:.1f}: {a.accept_prob((b + 0.5) / N_BINS):.2f} (n={a.bin_trials[b]:.0f})"
        for b in range(N_BINS)
    ]
    who = " for each draft on its own path (keeps K i.i.d. drafts exact)" if per_draft else ""
    return (
        f"draft length: up to {cap}, decided token by token{who} from the acceptance per draft "
        "confidence\n  " + ", ".join(cells)
    )
