"""Measured decode costs on THIS machine, kept honest by the timings generation sees anyway.

A curve is seconds per llama_decode of n tokens. It is measured once per model file and
placement (a few sizes, a few seconds), cached on disk, and then healed from live timings:
every decode of a known size during generation is a free measurement (Context.on_decode).
Contention only ever adds time, so a live sample lowers the curve quickly (the minimum of a
few recent ones) but raises it only when a whole window of samples says so (a persistently
different machine state wins; one slow sample never does). A healed size also rescales the
sizes not seen live (the curve's shape is kept, its level follows the machine).

Two prices per size: the quiet one (measured, healed, saved) and, while the machine is
busy, the contended one. A window that raises a size beyond CONTENTION x its quiet price
(or above a ceiling no quiet machine reaches: a small draft's step dearer than the
target's, contention.py) is contention, not a new truth: it prices decisions while it
lasts (a busy machine really is slower now), is never saved, and ends at the first live
sample back near the quiet price, which also drops the contention-era samples. A busy
minute once raised a draft's curve 59x, saved it, and auto never ran the draft again, so
nothing could lower it (issue 40): now nothing busy reaches the disk, a curve read from an
older cache drops such entries, and auto re-tests a contended draft with a probe priced at
the quiet prices (decode/policy/auto.py).

A raise that is kept (below CONTENTION) is re-tested by every later process: a raised size
is priced at the curve's level until the process has seen it live LOWER_AFTER times (then
quiet samples lower it, or the raise stands). Before, auto avoided a size a busier day had
priced high, so nothing sampled it again (`raised`).

A lowering beyond REMEASURE_BOUND marks the curve stale (it was timed on a busy machine).
A stale curve is not re-timed by itself: a re-timing inside a turn made every other request
of a busy server wait seconds for it (issue 24), while healing already brings the sizes
generation uses back; the flag is information (`localspec costs show`), and `--recalibrate`
or `localspec costs clear` re-time on request.

A decode's price also grows with its place in the context (each row attends over all of
it): the curve's sizes are the prices at the timing depth, live timings are brought back to
that depth before they heal, and a price is asked at the context length now (span.py).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from localspec.backend import Context
from localspec.costmodel import store
from localspec.costmodel.span import TILES, SpanFit

# every size a draft block can take (1 + up to 16 drafted tokens, a few drafts' tries), then
# coarse: the F16 target's cost is not smooth in n (2 threads: 8 tokens 151 ms, 9 tokens
# 146, 11 tokens 153, 16 tokens 192 < 15 tokens 202), so `--recalibrate` times them all
BATCH_SIZES = tuple(range(1, 25)) + (32, 48, 64)
# the first estimate: a few sizes, 2 repeats (F16 1.5B target on 2 threads: ~5 s); the sizes
# generation actually uses are then filled in from live timings
QUICK_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
CURVE_VERSION = 3  # in the cache key: older curve files are re-timed
WINDOW = 8  # live samples kept per size
LOWER_AFTER = 2  # the min of this many recent samples below the curve lowers it
RAISE_AFTER = 8  # ... a window of this many all above the curve by RAISE_BOUND raises it
# 1.10, not more: a curve's 2-4-token head timed 17 % low (a noisy first estimate, flattened
# by the monotone envelope) was never raised at 1.25 and priced short drafts too cheap (auto
# chose L=3 on the F16 target; bench, issue 15). A window's minimum is robust to contention
# (it only adds time), so 10 % above is a real difference.
RAISE_BOUND = 1.10
REMEASURE_BOUND = 1.5  # live vs measured beyond this factor: the curve is marked stale
# a window this far above the quiet price is contention (never saved, ends at a quiet sample):
# the first estimate's errors are within 1.25x (issue 15: 17 % low); the busy minute of issue
# 40 raised a draft step 59x and the target's long blocks 2.4x
CONTENTION = 1.5
ANCHOR_LEVEL = 0.10  # how far the curve's level may be from its timing's for the timing to anchor k
DEPTH = 64  # the context a curve's sizes are timed after: its prices are those at this length


TIMED_HERE: set[str] = set()  # curve keys this process timed (an implausible one is re-timed once)


def cache_dir() -> Path:
    home = os.environ.get("LOCALSPEC_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "localspec")
    return Path(home) / "costs"


@dataclass
class CostCurve:
    """Seconds per llama_decode of n tokens (interpolated between measured sizes), healed
    from live timings (see the module docstring)."""

    sizes: list[int]
    seconds: list[float]
    healed: dict[int, float] = field(default_factory=dict)  # size -> quiet live estimate
    scale: float = 1.0  # live level / measured level, for sizes not seen live
    stale: bool = False  # live timings disagreed beyond REMEASURE_BOUND (it still heals)
    dirty: bool = field(default=False, compare=False)  # healed since the last save
    live: dict[int, list[float]] = field(default_factory=dict, repr=False, compare=False)
    busy: dict[int, float] = field(default_factory=dict, compare=False)  # size -> contended price (never saved)
    busy_scale: float = field(default=1.0, compare=False)  # contended level / quiet level, other sizes
    # above this no quiet machine prices size n (a small draft's step vs the target's:
    # contention.py); None: no such bound
    ceiling: Callable[[int], float] | None = field(default=None, repr=False, compare=False)
    # a guessed price with no timing behind it (the MTP head's, a share of the target's step):
    # its first live estimate sets it, whatever its size; contention is judged against prices
    # that were timed or healed, never against a guess (a 70x "rise" over a guess is news)
    prior: bool = field(default=False, compare=False)
    # sizes whose quiet price a live window raised (saved): a raised size is priced at the
    # curve's level until this process has seen it LOWER_AFTER times, so that it is tried
    # again. Without that a raise from a busier day was never re-tested: auto avoided the
    # size it priced high and nothing could lower it (the Q4 target's 16 rows held at 369 ms
    # where they cost 282: every short lookup bet 15 rows at 330 ms instead of 16)
    raised: set[int] = field(default_factory=set, compare=False)
    # seconds per row per context position beyond DEPTH (span.py: fitted live, saved)
    k: float = 0.0
    k_support: float = 0.0  # what k was read over (span.py): a new slope must match it
    # the context length a price is asked at (the context's length now); None: no place is
    # priced or healed (a recurrent state, a stand-in: costmodel.length_of)
    where: Callable[[], int] | None = field(default=None, repr=False, compare=False)
    fit: SpanFit = field(default_factory=SpanFit, repr=False, compare=False)

    def measured(self, n: int) -> float:
        """The timed value at n (interpolated; proportional past the last size)."""
        if n <= self.sizes[-1]:
            return float(np.interp(n, self.sizes, self.seconds))
        return self.seconds[-1] * n / self.sizes[-1]

    def quiet(self, n: int) -> float:
        """The quiet machine's price of n tokens: measured, healed by quiet samples."""
        got = self.healed.get(n)
        return got if got is not None else self.measured(n) * self.scale

    def __call__(self, n: int) -> float:
        """The price now, at the context's length now: the contended one while the machine
        is busy, else the quiet one (a raised size not yet seen live in this process: at the
        curve's level, `raised`)."""
        deeper = self.k * n * max(self.where() - DEPTH, 0) if self.k and self.where is not None else 0.0
        if not self.busy:
            if n in self.raised and self.needs_samples(n):
                return min(self.quiet(n), self.measured(n) * self.scale) + deeper
            return self.quiet(n) + deeper
        got = self.busy.get(n)
        return (got if got is not None else self.quiet(n) * self.busy_scale) + deeper

    def at_depth(self, n: int, seconds: float, pos: int) -> float:
        """A live timing of n rows from context position `pos`, brought back to DEPTH (what
        the curve's sizes price); it also feeds the fit of k (span.py)."""
        if self.fit.add(n, seconds, pos):
            # the timed prices anchor a slope only while the machine runs at their level: on a
            # machine 22 % slower than when it was timed they read 7.7 µs for ~5
            timed = ({m: s for m, s in zip(self.sizes, self.seconds, strict=True) if m in TILES}
                     if abs(self.scale - 1.0) <= ANCHOR_LEVEL else None)
            got = self.fit.slope(timed, DEPTH)
            if got is not None and got[1] >= self.k_support and got[0] != self.k:
                self.k, self.k_support = got
                self.dirty = True
        return seconds - self.k * n * max(pos - DEPTH, 0)

    @property
    def contended(self) -> bool:
        """Whether live samples say the machine is busy now (priced, never saved)."""
        return bool(self.busy)

    def needs_samples(self, n: int) -> bool:
        """Whether size n has been seen live too few times to heal it yet."""
        return len(self.live.get(n, ())) < LOWER_AFTER

    def observe(self, n: int, seconds: float, pos: int | None = None) -> None:
        """One live timing of an n-token decode (only sizes a draft block can take) whose
        first row sat at context position `pos` (None, or a curve with no `where`: the
        place is not priced)."""
        if n < 1 or n > self.sizes[-1] or seconds <= 0.0:
            return
        if pos is not None and self.where is not None:  # a curve priced by place (span.py)
            seconds = self.at_depth(n, seconds, pos)
            if seconds <= 0.0:
                return
        w = self.live.setdefault(n, [])
        w.append(seconds)
        del w[:-WINDOW]
        now = self(n) if self.busy else self.quiet(n)  # a re-tested raise is judged on its own price
        est = None
        if len(w) >= LOWER_AFTER and min(w[-LOWER_AFTER:]) < now / 1.05:
            est = min(w[-LOWER_AFTER:])
        elif len(w) >= RAISE_AFTER and min(w[-RAISE_AFTER:]) > now * RAISE_BOUND:
            est = min(w[-RAISE_AFTER:])
        if est is None:
            return
        quiet = self.quiet(n)
        # contention is judged against the dearer of the quiet and the timed price: a level
        # lowered by one size (scale) must not make the others' timed prices look busy; a
        # sample below the quiet price never is contention (it lowers the quiet price)
        ref = max(quiet, self.measured(n))
        if est > quiet and not self.prior and (est > ref * CONTENTION or (self.ceiling is not None and est > self.ceiling(n))):
            self.busy[n] = est  # contention: the price while it lasts, never saved
            self.busy_scale = statistics.median(v / self.quiet(m) for m, v in self.busy.items())
            return
        if self.busy:  # a sample near the quiet price: the machine is quiet again
            self.calm()
            if quiet / 1.05 <= est <= quiet * RAISE_BOUND:
                return  # back at the quiet price: nothing to heal
        self._heal(n, est)

    def _heal(self, n: int, est: float) -> None:
        """A quiet estimate of size n: kept (and saved), the level of the others follows."""
        if est > self.quiet(n):
            self.raised.add(n)
        else:
            self.raised.discard(n)
        self.healed[n] = est
        self.dirty = True
        self.prior = False
        self.scale = statistics.median(v / self.measured(m) for m, v in self.healed.items())
        if self.measured(n) / est > REMEASURE_BOUND:
            self.stale = True  # timed far too slow: the machine was busy while it was timed

    def calm(self) -> None:
        """Contention is over: the quiet prices again, and the live samples taken while it
        lasted are dropped (they would count in the next window)."""
        self.busy.clear()
        self.busy_scale = 1.0
        for m, w in self.live.items():
            w[:] = [v for v in w if v <= self.quiet(m) * CONTENTION]

    def forget(self, busy: Callable[[int, float], bool]) -> None:
        """Drop the saved sizes `busy(n, seconds)` calls contention's (a cache written before
        contention was kept apart, contention.py's ceiling); the level and the stale mark
        follow what is left, and the curve is saved again without them."""
        for n in [n for n, v in self.healed.items() if busy(n, v)]:
            del self.healed[n]
            self.raised.discard(n)
        self.scale = statistics.median(v / self.measured(m) for m, v in self.healed.items()) if self.healed else 1.0
        self.stale = any(self.measured(m) / v > REMEASURE_BOUND for m, v in self.healed.items())
        self.dirty = True

    def to_json(self) -> dict:
        """The quiet machine's curve: contended prices are never saved."""
        return {"sizes": self.sizes, "seconds": self.seconds, "healed": {str(k): v for k, v in self.healed.items()},
                "scale": self.scale, "stale": self.stale, "raised": sorted(self.raised), "k": self.k,
                "k_support": self.k_support}

    @classmethod
    def from_json(cls, d: dict) -> CostCurve:
        """The saved curve, less what contention left in files this version did not write
        (a healed size beyond CONTENTION x its measured price: issue 40's 59x draft step)."""
        c = cls([int(s) for s in d["sizes"]], [float(s) for s in d["seconds"]],
                {int(k): float(v) for k, v in (d.get("healed") or {}).items()},
                float(d.get("scale", 1.0)), bool(d.get("stale", False)))
        c.k = max(float(d.get("k", 0.0)), 0.0)
        c.k_support = float(d.get("k_support", 0.0)) / 2  # halved at each load: a changed machine re-learns
        if "raised" in d:
            c.raised = {int(n) for n in d["raised"]} & set(c.healed)
        else:  # a file from before raises were recorded: the sizes healed above the level
            c.raised = {n for n, v in c.healed.items() if v > c.measured(n) * c.scale}
        if c.scale > CONTENTION or any(v > c.measured(n) * CONTENTION for n, v in c.healed.items()):
            c.forget(lambda n, v: v > c.measured(n) * CONTENTION)
        return c


def curve_key(ctx: Context) -> str:
    """Model file (name + size) x where it runs: curves timed on the CPU are never used for a
    GPU placement, nor for another thread count."""
    st = ctx.model.path.stat()
    where = getattr(ctx, "placement_key", None) or f"t={ctx.threads}"
    safe = "".join(c if c.isalnum() or c in "=.-_" else "_" for c in where)
    return f"{ctx.model.path.name}-{st.st_size}-{safe}-v{CURVE_VERSION}"


def curve_path(ctx: Context) -> Path:
    return cache_dir() / f"{curve_key(ctx)}.json"


def measure_steps(
    ctx: Context, sizes: tuple[int, ...] = BATCH_SIZES, reps: int = 5, depth: int = DEPTH
) -> Generator[tuple[int, int], None, CostCurve]:
    """Time decodes of n tokens on a scratch sequence after `depth` context tokens, yielding
    (sizes done, sizes in all) after each repeat, so a frontend can show progress (the
    count moves once per size) and a session's background timer can let a generation run
    in between (costmodel/session.py): it waits for one timed decode (and the context
    tokens, when a generation dropped them), never for a whole size (the 64-token size on
    a busy 2-core machine took 12 s as one step).

    The minimum over repeats is the cost (interference only ever adds time), and the curve
    is made non-decreasing from the right: n tokens cost at most what a bigger batch costs
    (where a bigger batch is measured cheaper, verifying more tokens is free on the target).
    A generation between two decodes drops the scratch sequence (a reset clears the whole
    context): the context tokens are decoded again when they are gone.
    """
    seq = ctx.n_seq_max - 1
    memory = getattr(ctx, "memory", None)
    if memory is not None and memory.has_state:
        # a recurrent state cannot lose the timed tokens and keep a prefix: time from an
        # empty scratch sequence, dropped whole between repeats (what the memory allows)
        depth = 0
    todo = [n for n in sizes if n <= ctx.n_batch]
    # largest first: on Mesa 22.3's lavapipe (Debian 12's software Vulkan) a decode whose
    # shape needs a shader pipeline ggml-vulkan has not built yet crashes the driver's
    # queue thread while earlier work of the same graph runs (exit 139 at the first
    # 3-token all-logits decode after 1-token ones); built from the big shapes down, the
    # small ones find theirs (issue 21; a driver race, this order avoids it here)
    times_of: dict[int, float] = {}
    b = ctx.batch
    for i, n in enumerate(sorted(todo, reverse=True)):
        times: list[float] = []
        while len(times) < reps:
            if depth and ctx.pos_max(seq) != depth - 1:
                # first, or dropped by a generation: built in the same step as the repeat
                # after it, so that every step times something (with one step between two
                # generations, which drop them, a step of its own would be built forever)
                ctx.seq_rm(seq, 0, -1)
                b.clear().add_sequence([1] * depth, 0, seq, logits_last=False)
                _scratch_decode(ctx)
            b.clear()
            for j in range(n):
                b.add(1, depth + j, seq, True)
            times.append(_scratch_decode(ctx))
            ctx.seq_rm(seq, depth, -1)
            if len(times) < reps:
                yield i, len(todo)
        times_of[n] = float(np.min(times))
        if i + 1 == len(todo):
            ctx.seq_rm(seq, 0, -1)
        yield i + 1, len(todo)
    out = [times_of[n] for n in todo]
    out = list(np.minimum.accumulate(np.array(out)[::-1])[::-1])
    return CostCurve(todo, out)


def _scratch_decode(ctx: Context) -> float:
    """One decode of the scratch batch, its seconds. Not live evidence and not a turn's
    work: the decode hook is off and the counters are put back (a generation may run
    before the next one, and reads both)."""
    hook, ctx.on_decode = getattr(ctx, "on_decode", None), None
    tap, ctx.after_decode = getattr(ctx, "after_decode", None), None  # nor history (backend/mtp.py)
    decodes, evaluated = ctx.n_decodes, ctx.n_evaluated
    span = getattr(ctx, "span", 0)  # a generation's length, which its prices are asked at
    try:
        t0 = time.perf_counter()
        ctx.decode()
        return time.perf_counter() - t0
    finally:
        ctx.on_decode = hook
        ctx.after_decode = tap
        ctx.n_decodes, ctx.n_evaluated = decodes, evaluated
        ctx.span = span


def measure(ctx: Context, sizes: tuple[int, ...] = BATCH_SIZES, reps: int = 5, depth: int = DEPTH) -> CostCurve:
    """measure_steps without progress."""
    gen = measure_steps(ctx, sizes, reps, depth)
    while True:
        try:
            next(gen)
        except StopIteration as done:
            return done.value


def load_curve(ctx: Context) -> CostCurve | None:
    """The cached curve of this model and placement, None when there is none (or it is
    unreadable). A stale one is returned as it is, healed sizes and level included: it
    keeps healing, and only --recalibrate re-times it (the module docstring)."""
    d = store.read_json(curve_path(ctx))  # what this process could not write, else the file
    if d is None:
        return None
    try:
        return CostCurve.from_json(d)
    except (ValueError, KeyError, TypeError):
        return None


def save_curve(ctx: Context, c: CostCurve) -> None:
    """Cache the curve: on disk, or in memory for this process where the cache directory
    cannot be written (a read-only LOCALSPEC_HOME; store.py warns once)."""
    store.write_json(curve_path(ctx), c.to_json())
    c.dirty = False


def timing_steps(
    ctx: Context, *, full: bool = False
) -> Generator[tuple[int, int], None, CostCurve]:
    """Time a curve (QUICK_SIZES x 2, or every size x 5 with full=True) and cache it."""
    c = yield from measure_steps(ctx, BATCH_SIZES if full else QUICK_SIZES, reps=5 if full else 2)
    TIMED_HERE.add(curve_key(ctx))
    save_curve(ctx, c)
    return c


def curve_for(ctx: Context, refresh: bool = False, progress: Callable[[int, int], None] | None = None) -> CostCurve:
    """Cached curve for this model file and placement; timed on first use (or refresh)."""
    c = None if refresh else load_curve(ctx)
    if c is not None:
        return c
    gen = timing_steps(ctx, full=refresh)
    while True:
        try:
            done, total = next(gen)
        except StopIteration as stop:
            return stop.value
        if progress is not None:
            progress(done, total)
