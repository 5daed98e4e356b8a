"""How often the target accepts the draft: a running rate and a per-confidence calibration.

Acceptance is a property of the (target, draft) pair and of the sampling (greedy or not), so
it is persisted per pair and loaded at the next start; the calibration is what the dynamic
draft length reads (the draft's own probability is a poor guess of acceptance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from localspec.backend import Context
from localspec.costmodel import store
from localspec.costmodel.curves import cache_dir

PRIOR_ALPHA = 0.7  # acceptance prior for a same-family pair before anything is measured
MAX_MEMORY = 400.0  # acceptance evidence kept (older evidence is scaled down): tracks drift
N_BINS = 10  # draft-confidence bins of the acceptance calibration
BIN_PRIOR = 4.0  # pseudo-trials per bin at acceptance = the bin's confidence
BIN_MEMORY = 200.0  # evidence kept per bin


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
    # what a bin starts from before this pair's own evidence: the shipped calibration of the
    # pair (costmodel/priors.draft_bins, fitted on the tuning half), else (None: no list, or a
    # thinly fitted bin) the bin's confidence.
    # The confidence alone says 0.55 where the greedy 0.5B Q4_0 draft's token was the F16
    # 1.5B's 0.8 of the time: a first turn's drafts stopped after ~3 tokens at 91 % acceptance
    bin_prior: list[float | None] | None = None

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
        fitted = self.bin_prior[b] if self.bin_prior is not None else None
        start = fitted if fitted is not None else (b + 0.5) / N_BINS
        return (self.bin_accepted[b] + BIN_PRIOR * start) / (self.bin_trials[b] + BIN_PRIOR)

    @staticmethod
    def path(target: Context, draft: Context, greedy: bool) -> Path:
        return cache_dir() / f"accept-{target.model.path.name}--{draft.model.path.name}-{'t0' if greedy else 'tx'}.json"

    @staticmethod
    def is_greedy(path: Path) -> bool:
        """Whether `path` (as `path` names it) holds a greedy target's acceptance."""
        return path.name.endswith("-t0.json")

    def load(self, path: Path) -> None:
        """Start from what this pair achieved before (acceptance is a property of the pair)."""
        d = store.read_json(path)  # what this process could not write, else the file
        if d is None:
            return
        try:
            self.accepted, self.trials = float(d["accepted"]), float(d["trials"])
            bins = d.get("bins")
            if isinstance(bins, list) and len(bins) == N_BINS:
                self.bin_accepted = [float(a) for a, _ in bins]
                self.bin_trials = [float(t) for _, t in bins]
        except (ValueError, KeyError, TypeError):
            pass

    def save(self, path: Path) -> None:
        """On disk, or in memory for this process where the cache cannot be written (store.py)."""
        bins = [[a, t] for a, t in zip(self.bin_accepted, self.bin_trials, strict=True)]
        store.write_json(path, {"accepted": self.accepted, "trials": self.trials, "bins": bins})


def _bin(conf: float) -> int:
    return min(max(int(conf * N_BINS), 0), N_BINS - 1)

