"""One generation turn: the shared state every loop reads and the clock it reports with."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from localspec.backend import Model
from localspec.backend.mtp import MtpHead
from localspec.config import GenConfig
from localspec.costmodel import CostModel
from localspec.decode.constrained import TurnConstraint
from localspec.decode.drafters.suffix import SuffixStore
from localspec.decode.drafters.suffix_shared import SlotSuffix
from localspec.decode.emitter import Emitter
from localspec.decode.state import KVState
from localspec.events import Stats, StatsUpdate
from localspec.stopflag import StopFlag

if TYPE_CHECKING:
    from localspec.decode.drafters.base import Drafter


@dataclass
class Turn:
    """Everything a loop needs for one assistant turn, fully set when the turn starts.

    method: the loop that runs (cfg.method unless the runtime resolved it, e.g. auto with
    no draft runs "ar"); costs: the cost model `auto` (and PARSE's auto finish) decide
    with, None for fixed settings; suffix: the session's store (decode/drafters/suffix.py; a pool's
    slot also reads the pool's, decode/drafters/suffix_shared.py), which outlives the turn; mtp: the
    target's MTP head (backend/mtp.py), which follows the target's context across turns.
    Loops report through `stats` and events only.
    """

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
    costs: CostModel | None = None
    suffix: SuffixStore | SlotSuffix | None = None  # the session's store (a slot's: with the pool's)
    mtp: MtpHead | None = None  # the target's MTP head, when the session loaded one
    constraint: TurnConstraint | None = None  # the turn's grammar (decode/constrained.py), if any
    t_start: float = field(default_factory=time.perf_counter)
    answer_start: int = -1  # where this turn's answer starts in the target's history (set below)

    def __post_init__(self) -> None:
        if not self.method:
            self.method = self.cfg.method
        if self.answer_start < 0:  # the prompt is committed when a turn starts (KVState.sync)
            self.answer_start = len(self.target.committed)

    def prefill_draft(self, drafter: Drafter) -> None:
        """Evaluate the prompt in the KV of the model `drafter` drafts with (`Drafter.draft`:
        the draft model's; None for a lookup or the target's MTP head) now, before the first
        iteration, and count it as prompt time (out of the decode clock): llama.cpp's
        speculative example evaluates its draft's prompt before its decode clock starts, so
        `bench speed` compares the same span; the server's timings and the stats line say the
        same. Called by a loop whose first iteration drafts with `drafter` (a fixed method, or
        auto starting in a model phase); a later switch to the draft catches up inside the
        decode. Each iteration's draft then evaluates only what the target committed since."""
        kv = drafter.draft
        if kv is None or self.should_stop():
            return
        t0 = time.perf_counter()
        kv.sync(self.target.committed, self.stop_flag)
        spent = time.perf_counter() - t0
        self.stats.prompt_seconds += spent
        self.t_start += spent

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
