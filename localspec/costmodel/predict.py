"""Predicted tok/s of AR and of every (method, K, L) from the measured curves and acceptance,
the choice `auto` makes, and the dynamic draft length's stop rule.

Speculation only pays when (draft cost + batched verify cost) per emitted token is below the
target's plain decode cost; on 2 cores with a cheap quantized target it often is not, so
`choose` returns None (plain AR) unless a setting beats AR by MARGIN.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from localspec.config import AUTO_MAX_K, AUTO_MAX_L, DRAFT_LOOKAHEAD, GenConfig
from localspec.costmodel.acceptance import Acceptance
from localspec.costmodel.curves import CostCurve

MARGIN = 1.05  # speculation must beat AR by 5 % to be chosen (measurement noise)
DYNAMIC_MAX_L = 16  # longest draft when its length is decided token by token


@dataclass
class CalibratedStop:
    """The dynamic draft length (proposer.DraftStop): draft one more token only while
    P(the draft so far and that token are accepted) x seconds per emitted token exceeds
    what the token costs (a draft step for K drafts + the marginal verify cost of K more
    tokens) -- or while some longer extension, up to `lookahead` tokens, would pay as a
    whole. Acceptance comes from the calibration, costs from the measured curves.

    Why the lookahead: a CPU's verify curve is a staircase (the matmul kernels work in
    blocks of rows; the F16 target's healed curve here: 12 rows 257 ms, 13 rows 308 ms,
    16 rows 340 ms), so one more row is sometimes dear and the next few nearly free. A rule
    that asked about the next row only stopped every draft at the foot of such a step: on
    the F16 code prompts drafts of exactly 5, accepted in full 95 % of the time
    (docs/performance.md#draft-lookahead). Tokens past the next are valued at the pair's
    mean acceptance. On a curve without steps (linear, like the Q4 target's up to 8 rows)
    the next row decides alone: if it does not pay, no longer extension does.
    """

    model: CostModel
    K: int
    seconds_per_token: float
    per_draft: bool = False  # asked about one draft's next token (its share of a step)
    lookahead: int = DRAFT_LOOKAHEAD  # tokens ahead one extension may run (GenConfig.draft_lookahead)

    def accept_prob(self, conf: float) -> float:
        return self.model.acceptance.accept_prob(conf)

    def worth(self, depth: int, p: float) -> bool:
        m = self.model
        n = 1 + self.K * (depth - 1)
        rows, step = (1, m.draft(self.K) / self.K) if self.per_draft else (self.K, m.draft(self.K))
        base, later = m.target(n), m.acceptance.alpha
        gain, reach = 0.0, p
        for j in range(1, max(self.lookahead, 1) + 1):
            gain += reach * self.seconds_per_token
            if gain > j * step + m.target(n + j * rows) - base:
                return True
            reach *= later
        return False


@dataclass
class Prediction:
    method: str
    K: int
    L: int
    tok_per_s: float
    expected_tokens: float
    seconds: float


@dataclass
class CostModel:
    """Predicts tok/s of AR and of (method, K, L) from measured curves and alpha."""

    target: CostCurve
    draft: CostCurve
    overhead: float = 0.0015  # seconds of Python work per iteration (updated from runs)
    acceptance: Acceptance = field(default_factory=Acceptance)
    acceptance_path: Path | None = None
    ar_checks: int = 0  # plain steps auto took to see the AR cost live (bounded: decode/policy/auto.py)
    # recurrent memories (KVState.lane): drafts longer than this cannot be rolled back on the
    # target, so a partly accepted one costs a catch-up decode (None: attention, no limit)
    target_rollback: int | None = None
    draft_reevaluates: bool = False  # a recurrent draft evaluates a partly kept draft again
    # prompt lookups' acceptance per matched n-gram length (costmodel/lookup.LookupGate),
    # kept with the session's cost model so every turn starts from what earlier ones learned
    lookup: Any = None

    def save_acceptance(self) -> None:
        if self.acceptance_path is not None:
            self.acceptance.save(self.acceptance_path)

    @property
    def stale(self) -> bool:
        """Live timings disagreed with a curve beyond its bound: re-time before trusting it."""
        return self.target.stale or self.draft.stale

    @property
    def contended(self) -> bool:
        """Whether a curve prices at a busy machine's cost now (curves.py: never saved)."""
        return self.target.contended or self.draft.contended

    def quiet(self) -> CostModel:
        """This model at the quiet machine's prices: what a probe of a contended draft is
        decided on (decode/policy/auto.py), so a busy minute cannot lock speculation out."""
        return replace(self, target=_Quiet(self.target), draft=_Quiet(self.draft))

    def prices(self) -> str:
        """Where the prices come from, for the notes a user reads: "" on a quiet machine's
        curves, else which are a busy machine's (contended) or timed far off (stale)."""
        said = []
        for role, c in (("target", self.target), ("draft", self.draft)):
            if c.contended:
                said.append(f"{role} contended ({c(1) / c.quiet(1):.1f}x its quiet price: a busy machine; "
                            "not saved, re-tested)")
            elif c.stale:
                said.append(f"{role} stale (live decodes far from what was timed: healing)")
        return "; ".join(said)

    def ar(self) -> float:
        return 1.0 / self.target(1)

    def why_ar(self) -> str:
        """One line for a user whose auto run fell back to plain decoding: why, and what
        would pay (measured here: the Q4 0.5B draft next to the Q4 1.5B target on 2 cores)."""
        sharing = getattr(self.target, "sharing", None)
        if sharing is not None and sharing():
            return ("other slots share this slot's decodes: in a shared round a drafted token costs "
                    "what an emitted one does (costmodel/inround.py), so it decodes plainly until alone")
        step, one = self.draft(1), self.target(1)
        verify8 = self.target(9) / one
        return (
            f"speculation does not pay on this machine: a draft step costs {step / one:.0%} of a "
            f"target step ({step * 1e3:.1f} vs {one * 1e3:.1f} ms) and verifying 8 drafted tokens "
            f"costs {verify8:.1f}x one; what would pay: a bigger or F16 target "
            "(`localspec models quantize`), a smaller draft, or a GPU build"
        )

    def expected_tokens(self, K: int, L: int, alpha: float | None = None) -> float:
        """E[tau] + 1: P(some draft matches i tokens) ~ 1 - (1 - alpha^i)^K."""
        a = self.acceptance.alpha if alpha is None else alpha
        return 1.0 + sum(1.0 - (1.0 - a**i) ** K for i in range(1, L + 1))

    def iteration_seconds(self, K: int, L: int) -> float:
        s = self.draft(1) + (L - 1) * self.draft(K) + self.target(1 + K * L) + self.overhead
        if self.target_rollback is None and not self.draft_reevaluates:
            return s
        a = self.acceptance.alpha
        kept = max(1, round(self.expected_tokens(K, L)))  # tokens a partial acceptance keeps
        return s + self.rollback_seconds(L, kept, a**L, a ** max(L - 1, 0), drafts=True)

    def rollback_seconds(self, L: int, kept: int, p_whole: float, p_draft_whole: float, drafts: bool) -> float:
        """What a recurrent memory adds to an L-token draft's iteration (0 for attention):
        the target's catch-up decode of the `kept` tokens when the draft is not accepted
        whole (chance 1 - p_whole) and is longer than its rollback snapshots, and a recurrent
        draft model's re-evaluation of them (chance 1 - p_draft_whole; `drafts`: a draft
        model drafted, not a lookup)."""
        s = 0.0
        if self.target_rollback is not None and L > self.target_rollback:
            s += (1.0 - p_whole) * self.target(kept)  # the catch-up decode on the main state
        if drafts and self.draft_reevaluates:
            s += (1.0 - p_draft_whole) * (self.draft(kept) - self.draft(1))
        return s

    def predict(self, method: str, K: int, L: int) -> Prediction:
        e = self.expected_tokens(K, L)
        s = self.iteration_seconds(K, L)
        return Prediction(method, K, L, e / s, e, s)

    def candidates(self, cfg: GenConfig) -> list[Prediction]:
        """Predictions for every (method, K, L) the config allows."""
        greedy = cfg.sampling.greedy
        sampled_draft = not greedy or (cfg.draft_temp or 0.0) > 0.0
        Ks = [cfg.K] if not cfg.auto_K else (list(range(1, AUTO_MAX_K + 1)) if sampled_draft else [1])
        Ls = [cfg.L] if not cfg.auto_L else list(range(1, AUTO_MAX_L + 1))
        out = []
        for K in Ks:
            methods = ["sd"] if greedy and K == 1 else (["gbv"] if K == 1 else ["mdbv"])
            for m in methods:
                for L in Ls:
                    out.append(self.predict(m, K, L))
        return out

    def choose(self, cfg: GenConfig) -> tuple[Prediction | None, float]:
        """Best speculative prediction, or None when AR is predicted at least as fast."""
        ar = self.ar()
        best = max(self.candidates(cfg), key=lambda p: p.tok_per_s)
        return (best if best.tok_per_s > MARGIN * ar else None), ar

    def draft_stop(self, best: Prediction, per_draft: bool = False, lookahead: int = DRAFT_LOOKAHEAD) -> CalibratedStop:
        """The dynamic-length rule for the chosen setting (valued at its predicted rate)."""
        return CalibratedStop(self, best.K, 1.0 / best.tok_per_s, per_draft, lookahead)



class _Quiet:
    """A curve priced at its quiet prices (CostCurve.quiet, InRound.quiet); the rest delegates."""

    __slots__ = ("curve",)

    def __init__(self, curve: CostCurve) -> None:
        self.curve = curve

    def __call__(self, n: int) -> float:
        return self.curve.quiet(n)

    def __getattr__(self, name: str):  # noqa: ANN204 - everything but the price is the curve's
        return getattr(self.curve, name)


def dynamic_length(cfg: GenConfig, best: Prediction) -> bool:
    """Whether auto decides the draft length token by token for this choice.

    At T > 0 with K >= 2 drafts, a length decided from all drafts makes them non-i.i.d.:
    mdbv is then measurably biased (tests/test_verify_exact.py). Each draft ending by its
    own path (per_draft_length) keeps mdbv and SpecTr exact; spectr-gbv was not enumerated
    that way, so its drafts keep a fixed L."""
    exact = cfg.sampling.greedy or best.K == 1 or best.method != "spectr-gbv"
    return cfg.dynamic_draft and exact


def per_draft_length(cfg: GenConfig, best: Prediction) -> bool:
    """Whether each of the K drafts must end by its own rule (K >= 2 at T > 0), not jointly."""
    return not cfg.sampling.greedy and best.K >= 2


def length_cap(cfg: GenConfig, best: Prediction) -> int:
    """The longest dynamic draft: at least DYNAMIC_MAX_L unless the user fixed -L."""
    return max(best.L, DYNAMIC_MAX_L) if cfg.auto_L else best.L


