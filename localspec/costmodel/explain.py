"""What `--explain` prints: the cost model's predictions, its choice and the calibration."""

from __future__ import annotations

from localspec.config import GenConfig
from localspec.costmodel.acceptance import N_BINS, Acceptance
from localspec.costmodel.predict import CostModel, dynamic_length, length_cap, per_draft_length


def explain(cm: CostModel | None, cfg: GenConfig) -> str:
    """A table of predictions and the choice, for --explain (cm None: there is no draft)."""
    if cm is None:
        return ("no draft model: prompt lookups in the turn's own text where they pay (the target's "
                "curve x their acceptance), else plain autoregressive decoding")
    best, ar = cm.choose(cfg)
    lines = [
        f"cost model (alpha={cm.acceptance.alpha:.2f}; target 1 tok {cm.target(1) * 1e3:.1f} ms, "
        f"16 tok {cm.target(16) * 1e3:.1f} ms; draft step {cm.draft(1) * 1e3:.1f} ms)",
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
    return "\n".join(lines)



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
