"""Cost model: measured batch costs on THIS machine -> predicted tok/s -> the method to run.

Speculation only pays when (draft cost + batched verify cost) per emitted token is below the
target's plain decode cost; on 2 cores with a cheap quantized target it often is not. So the
costs are measured (once per model file and thread count, cached), acceptance is tracked
while generating, and `auto` picks the fastest (method, K, L) -- or plain AR when nothing
beats it. `explain()` prints the table behind the choice ("why did it get slower?").
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from localspec.backend import Context
from localspec.config import GenConfig

# every size a draft block can take (1 + up to 16 drafted tokens, a few drafts' tries), then
# coarse: the F16 target's cost is not smooth in n (2 threads: 8 tokens 151 ms, 9 tokens
# 146, 11 tokens 153, 16 tokens 192 < 15 tokens 202), so sizes are not interpolated where
# the dynamic length's marginal costs are read
BATCH_SIZES = tuple(range(1, 25)) + (32, 48, 64)
CURVE_VERSION = 2  # in the cache key: curves measured on the older, coarser sizes are redone
PRIOR_ALPHA = 0.7  # acceptance prior for a same-family pair before anything is measured
MAX_MEMORY = 400.0  # acceptance evidence kept (older evidence is scaled down): tracks drift
MARGIN = 1.05  # speculation must beat AR by 5 % to be chosen (measurement noise)
N_BINS = 10  # draft-confidence bins of the acceptance calibration
BIN_PRIOR = 4.0  # pseudo-trials per bin at acceptance = the bin's confidence
BIN_MEMORY = 200.0  # evidence kept per bin
DYNAMIC_MAX_L = 16  # longest draft when its length is decided token by token


def cache_dir() -> Path:
    home = os.environ.get("LOCALSPEC_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "localspec")
    return Path(home) / "costs"


@dataclass
class CostCurve:
    """Seconds per llama_decode of n tokens (interpolated between measured sizes)."""

    sizes: list[int]
    seconds: list[float]

    def __call__(self, n: int) -> float:
        return float(np.interp(n, self.sizes, self.seconds, right=None)) if n <= self.sizes[-1] else (
            self.seconds[-1] * n / self.sizes[-1]
        )


def _key(ctx: Context) -> str:
    st = ctx.model.path.stat()
    return f"{ctx.model.path.name}-{st.st_size}-t{ctx.threads}-v{CURVE_VERSION}"


def measure(ctx: Context, sizes: tuple[int, ...] = BATCH_SIZES, reps: int = 5, depth: int = 64) -> CostCurve:
    """Time decodes of n tokens on a scratch sequence after `depth` context tokens.

    The minimum over repeats is the cost (interference only ever adds time), and the curve
    is made non-decreasing from the right: n tokens cost at most what a bigger batch costs
    (where a bigger batch is measured cheaper, verifying more tokens is free on the target).
    """
    seq = ctx.n_seq_max - 1
    b = ctx.batch
    b.clear().add_sequence([1] * depth, 0, seq, logits_last=False)
    ctx.decode()
    out = []
    for n in sizes:
        if n > ctx.n_batch:
            break
        times = []
        for _ in range(reps):
            b.clear()
            for j in range(n):
                b.add(1, depth + j, seq, True)
            t0 = time.perf_counter()
            ctx.decode()
            times.append(time.perf_counter() - t0)
            ctx.seq_rm(seq, depth, -1)
        out.append(float(np.min(times)))
    out = list(np.minimum.accumulate(np.array(out)[::-1])[::-1])
    ctx.seq_rm(seq, 0, -1)
    ctx.n_decodes -= 1 + reps * len(out)
    ctx.n_evaluated -= depth + sum(reps * n for n in sizes[: len(out)])
    return CostCurve(list(sizes[: len(out)]), out)


def curve_for(ctx: Context, refresh: bool = False) -> CostCurve:
    """Cached curve for this (model file, threads); measured on first use."""
    path = cache_dir() / f"{_key(ctx)}.json"
    if path.exists() and not refresh:
        try:
            d = json.loads(path.read_text())
            return CostCurve(d["sizes"], d["seconds"])
        except (ValueError, KeyError):
            pass
    c = measure(ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"sizes": c.sizes, "seconds": c.seconds}))
    os.replace(tmp, path)
    return c


@dataclass
class Acceptance:
    """Running estimate of the per-token acceptance rate alpha (sd-style, position-wise)."""

    accepted: float = 0.0
    trials: float = 0.0
    prior_weight: float = 8.0
    prior: float = PRIOR_ALPHA
    # calibration: acceptance of a draft token given the draft's confidence in it (binned);
    # a draft's own probability is a poor guess of it (measured on the F16 pair at T=0:
    # tokens drafted at confidence 0.1-0.2 were accepted 35 % of the time, at 0.6-0.7 80 %)
    bin_accepted: list[float] = field(default_factory=lambda: [0.0] * N_BINS)
    bin_trials: list[float] = field(default_factory=lambda: [0.0] * N_BINS)

    @property
    def alpha(self) -> float:
        return (self.accepted + self.prior * self.prior_weight) / (self.trials + self.prior_weight)

    def update(self, tau: int, L: int, confs: list[float] | None = None) -> None:
        """Positions 0..tau-1 accepted, position tau (if < L) rejected; later ones unseen.

        confs: the draft's confidence at each drafted position (calibration evidence)."""
        self.accepted += tau
        self.trials += tau + (1 if tau < L else 0)
        if self.trials > MAX_MEMORY:
            scale = MAX_MEMORY / self.trials
            self.accepted *= scale
            self.trials *= scale
        for i, c in enumerate((confs or [])[: tau + 1]):
            b = _bin(c)
            self.bin_accepted[b] += 1.0 if i < tau else 0.0
            self.bin_trials[b] += 1.0
            if self.bin_trials[b] > BIN_MEMORY:
                self.bin_accepted[b] *= BIN_MEMORY / self.bin_trials[b]
                self.bin_trials[b] = BIN_MEMORY

    def accept_prob(self, conf: float) -> float:
        """Calibrated chance that a token drafted at confidence `conf` is accepted."""
        b = _bin(conf)
        mid = (b + 0.5) / N_BINS
        return (self.bin_accepted[b] + BIN_PRIOR * mid) / (self.bin_trials[b] + BIN_PRIOR)

    @staticmethod
    def path(target: Context, draft: Context, greedy: bool) -> Path:
        return cache_dir() / f"accept-{target.model.path.name}--{draft.model.path.name}-{'t0' if greedy else 'tx'}.json"

    def load(self, path: Path) -> None:
        """Start from what this pair achieved before (acceptance is a property of the pair)."""
        try:
            d = json.loads(path.read_text())
            self.accepted, self.trials = float(d["accepted"]), float(d["trials"])
            bins = d.get("bins")
            if isinstance(bins, list) and len(bins) == N_BINS:
                self.bin_accepted = [float(a) for a, _ in bins]
                self.bin_trials = [float(t) for _, t in bins]
        except (OSError, ValueError, KeyError, TypeError):
            pass

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        bins = [[a, t] for a, t in zip(self.bin_accepted, self.bin_trials, strict=True)]
        tmp.write_text(json.dumps({"accepted": self.accepted, "trials": self.trials, "bins": bins}))
        os.replace(tmp, path)


def _bin(conf: float) -> int:
    return min(max(int(conf * N_BINS), 0), N_BINS - 1)


@dataclass
class CalibratedStop:
    """The dynamic draft length (proposer.DraftStop): draft one more token only while
    P(the draft so far and that token are accepted) x seconds per emitted token exceeds
    what the token costs (a draft step for K drafts + the marginal verify cost of K more
    tokens). Acceptance comes from the calibration, costs from the measured curves.
    """

    model: CostModel
    K: int
    seconds_per_token: float
    per_draft: bool = False  # asked about one draft's next token (its share of a step)

    def accept_prob(self, conf: float) -> float:
        return self.model.acceptance.accept_prob(conf)

    def worth(self, depth: int, p: float) -> bool:
        m = self.model
        n = 1 + self.K * (depth - 1)
        if self.per_draft:
            marginal = m.draft(self.K) / self.K + m.target(n + 1) - m.target(n)
        else:
            marginal = m.draft(self.K) + m.target(n + self.K) - m.target(n)
        return p * self.seconds_per_token > marginal


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

    def save_acceptance(self) -> None:
        if self.acceptance_path is not None:
            self.acceptance.save(self.acceptance_path)

    def ar(self) -> float:
        return 1.0 / self.target(1)

    def expected_tokens(self, K: int, L: int, alpha: float | None = None) -> float:
        """E[tau] + 1: P(some draft matches i tokens) ~ 1 - (1 - alpha^i)^K."""
        a = self.acceptance.alpha if alpha is None else alpha
        return 1.0 + sum(1.0 - (1.0 - a**i) ** K for i in range(1, L + 1))

    def iteration_seconds(self, K: int, L: int) -> float:
        return self.draft(1) + (L - 1) * self.draft(K) + self.target(1 + K * L) + self.overhead

    def predict(self, method: str, K: int, L: int) -> Prediction:
        e = self.expected_tokens(K, L)
        s = self.iteration_seconds(K, L)
        return Prediction(method, K, L, e / s, e, s)

    def candidates(self, cfg: GenConfig) -> list[Prediction]:
        """Predictions for every (method, K, L) the config allows."""
        greedy = cfg.sampling.temp <= 0.0
        sampled_draft = not greedy or (cfg.draft_temp or 0.0) > 0.0
        Ks = [cfg.K] if not cfg.auto_K else ([1, 2, 3, 4] if sampled_draft else [1])
        Ls = [cfg.L] if not cfg.auto_L else list(range(1, 17))
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

    def draft_stop(self, best: Prediction, per_draft: bool = False) -> CalibratedStop:
        """The dynamic-length rule for the chosen setting (valued at its predicted rate)."""
        return CalibratedStop(self, best.K, 1.0 / best.tok_per_s, per_draft)


def model_for(session, greedy: bool = True) -> CostModel:
    """The session's cost model (curves measured on first use, then cached on disk).

    The acceptance estimate is loaded from this pair's previous runs (kept apart for greedy
    and sampled targets, whose acceptance differs) and saved after each turn.
    """
    cm = getattr(session, "costs", None)
    if cm is None:
        cm = CostModel(curve_for(session.target.ctx), curve_for(session.draft.ctx))
        session.costs = cm
    path = Acceptance.path(session.target.ctx, session.draft.ctx, greedy)
    if cm.acceptance_path != path:
        cm.acceptance = Acceptance()
        cm.acceptance.load(path)
        cm.acceptance_path = path
    return cm


def explain(session, cfg: GenConfig) -> str:
    """A table of predictions and the choice, for --explain."""
    if session.draft is None:
        return "no draft model: plain autoregressive decoding"
    cm = model_for(session, cfg.sampling.temp <= 0)
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


def dynamic_length(cfg: GenConfig, best: Prediction) -> bool:
    """Whether auto decides the draft length token by token for this choice.

    At T > 0 with K >= 2 drafts, a length decided from all drafts makes them non-i.i.d.:
    mdbv is then measurably biased (tests/test_verify_exact.py). Each draft ending by its
    own path (per_draft_length) keeps mdbv and SpecTr exact; spectr-gbv was not enumerated
    that way, so its drafts keep a fixed L."""
    exact = cfg.sampling.temp <= 0.0 or best.K == 1 or best.method != "spectr-gbv"
    return cfg.dynamic_draft and exact


def per_draft_length(cfg: GenConfig, best: Prediction) -> bool:
    """Whether each of the K drafts must end by its own rule (K >= 2 at T > 0), not jointly."""
    return cfg.sampling.temp > 0.0 and best.K >= 2


def length_cap(cfg: GenConfig, best: Prediction) -> int:
    """The longest dynamic draft: at least DYNAMIC_MAX_L unless the user fixed -L."""
    return max(best.L, DYNAMIC_MAX_L) if cfg.auto_L else best.L


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
