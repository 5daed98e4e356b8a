"""One generation turn: the shared state every loop reads and the clock it reports with."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from localspec.backend import Model
from localspec.config import GenConfig
from localspec.decode.emitter import Emitter
from localspec.decode.state import KVState
from localspec.events import Stats, StatsUpdate
from localspec.session import StopFlag


@dataclass
class Turn:
    """Everything a loop needs for one assistant turn."""

    target_model: Model
    target: KVState
    cfg: GenConfig
    emitter: Emitter
    stats: Stats
    rng: np.random.Generator
    stop_flag: StopFlag
    draft_model: Model | None = None
    draft: KVState | None = None
    method: str = ""
    costs: Any = None  # CostModel when method == "auto"
    last_decision: tuple[int, int, float] | None = None  # (tau, L, overhead s) of the last iteration
    last_confs: list[float] = field(default_factory=list)  # draft confidences of its kept draft
    t_start: float = field(default_factory=time.perf_counter)

    def should_stop(self) -> bool:
        """The loop ends at the next iteration boundary when the user asked or text ended."""
        return self.emitter.done is not None or self.stop_flag.is_set()

    def tick(self) -> StatsUpdate:
        """Refresh wall time and hand out a snapshot."""
        self.stats.seconds = time.perf_counter() - self.t_start
        self.stats.n_tokens = len(self.emitter.tokens)
        return StatsUpdate(self.stats.copy())

    def room(self, n: int) -> bool:
        """Whether n more tokens fit in the target context (and draft, if any)."""
        ok = self.target.n_past + n <= self.target.ctx.n_ctx
        if self.draft is not None:
            ok = ok and self.draft.n_past + n <= self.draft.ctx.n_ctx
        return ok
