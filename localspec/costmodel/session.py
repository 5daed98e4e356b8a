"""SessionCosts: one session's cost model, timed without ever blocking a reply for long.

Timing the curves takes seconds (QUICK_SIZES x 2 per model on first use, every size x 5
with --recalibrate). Done inside a turn, it made `localspec chat`'s first reply wait ~20 s
and a busy server's requests wait for re-timings nobody asked for (issue 24). So:

- a stale curve is never re-timed here: it heals from live decodes (curves.py);
- a frontend with idle time (serve, chat) calls `start()`: a background thread times the
  missing curves one repeat at a time, each step holding the DecodeGate, which keeps
  steps and generations apart (llama.cpp contexts are not thread-safe, and a step would
  also distort a generation's live timings). A generation that starts meanwhile waits at
  most for the step in flight (Stats.timing_seconds) and runs what needs no missing curve:
  prompt lookups priced on the target's curve once that is timed, else plain decoding,
  with a note saying so. The timer steps again once no generation ran for a moment
  (or, starved of such moments, at each generation's end: gate.py);
- without start() (`localspec run`, `--explain`, a library caller) the first turn that
  needs the cost model times it first, as Progress events, and stops after the step in
  flight when the turn is asked to stop (the next turn resumes it).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from localspec import costmodel
from localspec.backend import Context
from localspec.config import GenConfig
from localspec.costmodel import curves
from localspec.costmodel.acceptance import Acceptance
from localspec.costmodel.curves import BATCH_SIZES, QUICK_SIZES, CostCurve
from localspec.costmodel.gate import DecodeGate, Ticket
from localspec.costmodel.lookup import LookupGate
from localspec.costmodel.predict import CostModel
from localspec.decode.drafters import registry
from localspec.errors import LocalspecError
from localspec.events import Progress
from localspec.stopflag import StopFlag

log = logging.getLogger("localspec.costmodel")

Report = Callable[[str, float], None]  # (message, fraction done), from the timer's thread
_timers: weakref.WeakSet[SessionCosts] = weakref.WeakSet()  # stopped at exit (below)


@atexit.register
def _stop_timers() -> None:
    """A timer still running at exit (`chat --plain` quit with Ctrl-D while it times) ends
    after its step, before the interpreter tears down what a decode in flight uses."""
    for costs in list(_timers):
        costs.close(timeout=10.0)


@dataclass
class TurnCosts:
    """What the cost model gives one turn."""

    costs: CostModel | None  # None: no cost model this turn (plain decoding)
    draft: bool = True  # False: the draft's curve is not timed yet: prompt lookups at most
    note: str = ""  # why not the whole cost model (the turn's choice note)
    seconds: float = 0.0  # spent timing before the turn (foreground timing)

    def usable(self, method: str, cfg: GenConfig) -> tuple[CostModel | None, GenConfig]:
        """The cost model a turn of `method` can decide with, and its config: with the
        target's curve alone, auto drafts by prompt lookup only; nothing else runs on half
        a model."""
        if self.costs is None or self.draft:
            return self.costs, cfg
        lookups = tuple(k for k in cfg.parts if registry.is_lookup(k))  # "ngram+draft" names ngram too
        if method == "auto" and lookups:
            return self.costs, replace(cfg, spec_type=lookups)
        return None, cfg


class SessionCosts:
    """The cost model of one session's (target, draft) contexts and the timing that builds
    it, in the foreground or in the background (the module docstring)."""

    def __init__(self, target: Context, draft: Context | None, recalibrate: bool = False) -> None:
        self.target, self.draft = target, draft
        self.recalibrate = recalibrate  # cleared once the curves were re-timed (once a session)
        self.costs: CostModel | None = None
        self.gate = DecodeGate()
        self.background = False  # start() was called: no turn times in the foreground
        self.error: str | None = None  # this placement could not be timed (said in each turn)
        self._timed: dict[int, CostCurve] = {}  # id(ctx) -> curve timed, not yet in `costs`
        self._steps: Generator[tuple[str, int, int], None, None] | None = None
        self._progress: tuple[int, int] | None = None
        self._partial: CostModel | None = None  # the target's curve alone, for lookups meanwhile
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._report: Report | None = None

    # ------------------------------------------------------------------ frontends
    def start(self, needed: bool, report: Report | None = None) -> None:
        """From now on time in the background: now when `needed` (the session's method decides
        with the cost model), else when a turn first needs it. Returns at once."""
        self.background = True
        self._report = report
        if needed:
            self._ensure_thread()

    @property
    def progress(self) -> tuple[int, int] | None:
        """(batch sizes timed, sizes to time) while timing runs or waits, else None."""
        return self._progress

    def close(self, timeout: float = 60.0) -> bool:
        """Stop the timer (after the step in flight); whether it ended (else the contexts
        must stay allocated: a decode may still run on them)."""
        self._closing.set()
        self.gate.wake()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    # ------------------------------------------------------------------ generations
    def enter(self) -> Ticket:
        """A generation starts: wait for the timing step in flight (said in the log; the
        turn reports it as Stats.timing_seconds)."""
        waited = self.gate.enter()
        if self._steps is not None:  # a timing half-way: its scratch sequence is a draft's
            self._drop_scratch()
        if waited:
            log.info("waited %.0f ms for the cost model's timing step in flight", waited * 1e3)
        return Ticket(self.gate, waited)

    @contextmanager
    def hold(self) -> Iterator[Ticket]:
        """The gate for work outside a generation that touches the contexts (reset, explain)."""
        ticket = self.enter()
        try:
            yield ticket
        finally:
            ticket.release()

    def for_turn(
        self, greedy: bool, stop: StopFlag | None = None, foreground: bool = False
    ) -> Generator[Progress, None, TurnCosts]:
        """The cost model for a turn that holds the gate. In the background mode a turn never
        times: what is missing is timed by the timer, and the turn gets what is ready. Else
        (or `foreground`, --explain) the missing curves are timed now, as Progress events,
        ending early when `stop` is set (the next turn resumes the timing)."""
        if self.error is None and self.background and not foreground:
            if self._steps is not None or self._plan():
                self._ensure_thread()
                return self._meanwhile()
            return TurnCosts(self._ready(greedy))
        t0 = time.perf_counter()
        timed = False
        shown = None
        while self.error is None and (step := self._step()) is not None:
            timed = True
            name, done, total = step
            if done and (name, done) != shown:  # once per size (a step is one repeat)
                shown = (name, done)
                yield Progress(f"timing {name} on this machine, once: {done}/{total} batch sizes", done / total)
            if stop is not None and stop.is_set():
                self._drop_scratch()
                return TurnCosts(None, note="stopped while the cost model was timing this machine",
                                 seconds=time.perf_counter() - t0)
        seconds = time.perf_counter() - t0 if timed else 0.0
        if self.error is not None:
            return TurnCosts(None, note=f"the cost model could not time this placement ({self.error})",
                             seconds=seconds)
        return TurnCosts(self._ready(greedy), seconds=seconds)

    def model_now(self, greedy: bool, report: Report | None = None) -> CostModel | None:
        """The whole cost model now (--explain): what is missing is timed in this thread (a
        background timing is finished here), each step reported."""
        with self.hold():
            steps = self.for_turn(greedy, foreground=True)
            while True:
                try:
                    ev = next(steps)
                except StopIteration as end:
                    return end.value.costs
                if report is not None:
                    report(ev.message, ev.fraction)

    def save(self, cm: CostModel) -> None:
        """Persist what a turn learned (acceptance, healed curves); a lookups-only model has
        no draft curve to save."""
        costmodel.save(self.target, None if cm is self._partial else self.draft, cm)

    def forget_learning(self, priors: bool = True) -> None:
        """Start the next turn as a fresh process on a fresh machine would: the lookup gate's
        evidence and the draft's acceptance forgotten (the curves kept), starting from the
        shipped priors, or (`priors` False) from the uninformed ones. `bench speed
        --first-turn` measures every prompt as such a first turn."""
        for cm in (self.costs, self._partial):
            if cm is not None:
                cm.lookup = LookupGate() if priors else LookupGate(prior={})
        cm = self.costs
        if cm is not None and cm.acceptance_path is not None and self.draft is not None:
            greedy = Acceptance.is_greedy(cm.acceptance_path)
            cm.acceptance = (costmodel.fresh_acceptance(self.target, self.draft, greedy) if priors
                             else Acceptance())

    # ------------------------------------------------------------------ internals
    def _plan(self) -> list[Context]:
        return costmodel.timing_plan(self.target, self.draft, self.costs, self.recalibrate)

    def _ensure_thread(self) -> None:
        if self.error is not None or (self._thread is not None and self._thread.is_alive()):
            return
        if self._steps is None:
            plan = self._plan()
            if not plan:
                return
            self._begin(plan)
        self._thread = threading.Thread(target=self._run, name="localspec-costs", daemon=True)
        _timers.add(self)
        self._thread.start()

    def _begin(self, plan: list[Context]) -> None:
        full = self.recalibrate
        sizes = BATCH_SIZES if full else QUICK_SIZES
        counts = [len([n for n in sizes if n <= c.n_batch]) for c in plan]
        self._progress = (0, sum(counts))
        self._steps = self._timing(plan, counts, full)

    def _timing(self, plan: list[Context], counts: list[int], full: bool) -> Generator[tuple[str, int, int], None, None]:
        """Each context's curve, one repeat per step (timing_steps caches it)."""
        base, total = 0, sum(counts)
        for ctx, count in zip(plan, counts, strict=True):
            gen = curves.timing_steps(ctx, full=full)
            while True:
                try:
                    done, of = next(gen)
                except StopIteration as end:
                    self._timed[id(ctx)] = end.value
                    break
                self._progress = (base + done, total)
                yield ctx.model.path.name, done, of
            base += count
        self.recalibrate = False

    def _step(self) -> tuple[str, int, int] | None:
        """One step of the timing (begun when there is something to time): (model, sizes
        done, sizes); None once nothing is left (or it failed: `error` says why)."""
        if self._steps is None:
            plan = self._plan()
            if not plan:
                return None
            self._begin(plan)
        assert self._steps is not None
        try:
            return next(self._steps)
        except StopIteration:
            self._steps, self._progress = None, None
            return None
        except (LocalspecError, OSError) as e:  # a backend that cannot be timed, a cache it cannot write
            self._steps, self._progress = None, None
            self.error = str(e)
            self._drop_scratch()
            log.warning("the cost model could not time this placement: %s", e)
            return None

    def _run(self) -> None:
        """The timer's thread: one step per quiet moment until nothing is left to time."""
        t0 = time.monotonic()
        total = self._progress[1] if self._progress else 0
        log.info("cost model: timing %d batch sizes in the background", total)
        shown = None
        try:
            while self.gate.claim(self._closing):
                try:
                    step = self._step()
                finally:
                    self.gate.release()
                if step is None:
                    break
                name, k, n = step
                if self._report is not None and self._progress is not None and k and (name, k) != shown:
                    shown = (name, k)
                    done, of = self._progress
                    self._report(f"timing {name} on this machine, once: {k}/{n} batch sizes", done / of)
        except Exception as e:  # never silent, never a dead thread holding the gate
            self._steps, self._progress = None, None
            self.error = f"{type(e).__name__}: {e}"
            log.exception("cost model timing failed")
        if self._steps is None and not self._closing.is_set():
            msg = (f"cost model timed in {time.monotonic() - t0:.1f} s" if self.error is None
                   else f"cost model: could not time this placement ({self.error})")
            log.info(msg)
            if self._report is not None:
                self._report(msg, 1.0)

    def _meanwhile(self) -> TurnCosts:
        """A turn during timing: the target's curve alone when it is there (prompt lookups
        price themselves with it; they keep what they learn into the whole model)."""
        done, total = self._progress or (0, 0)
        note = f"the cost model is still timing this machine ({done}/{total} batch sizes)"
        log.info("a turn runs without the whole cost model: %s", note)
        t = self._timed.get(id(self.target)) or (self._partial.target if self._partial else None)
        if t is None and self.target not in self._plan():
            t = costmodel.load_curve(self.target)
        if t is None:
            return TurnCosts(None, draft=False, note=note)
        if self._partial is None or self._partial.target is not t:
            self._partial = CostModel(t, CostCurve([1], [0.0]))
        self.target.on_decode = t.observe  # it heals meanwhile
        t.where = costmodel.length_of(self.target)
        return TurnCosts(self._partial, draft=False, note=note)

    def _ready(self, greedy: bool) -> CostModel:
        """The whole cost model (nothing is left to time), acceptance loaded for `greedy`."""
        cm = self._seeded()
        if self.draft is None:
            steps = costmodel.target_steps(self.target, cm)
            while True:  # nothing to time: it returns at once
                try:
                    next(steps)
                except StopIteration as end:
                    self.costs = end.value
                    break
        else:
            self.costs = costmodel.model_for(self.target, self.draft, greedy, cm)
        return self.costs

    def _seeded(self) -> CostModel | None:
        """`costs` with what was timed since, or a new model of the timed curves (the
        lookups' gate carried over); None: model_for loads the cached curves."""
        t = self._timed.pop(id(self.target), None)
        d = self._timed.pop(id(self.draft), None) if self.draft is not None else None
        cm = self.costs
        if cm is not None:
            cm.target, cm.draft = t or cm.target, d or cm.draft
            return cm
        partial, self._partial = self._partial, None
        if t is None and d is None and partial is None:
            return None
        t = t or (partial.target if partial is not None else None) or costmodel.load_curve(self.target)
        d = d or (costmodel.load_curve(self.draft) if self.draft is not None else CostCurve([1], [0.0]))
        if t is None or d is None:
            return None
        cm = CostModel(t, d)
        if partial is not None:
            cm.lookup = partial.lookup
        return cm

    def _drop_scratch(self) -> None:
        """Forget a half-way timing's scratch tokens (the next step builds them again)."""
        for ctx in (self.target, self.draft):
            if ctx is not None:
                ctx.seq_rm(ctx.n_seq_max - 1, 0, -1)
