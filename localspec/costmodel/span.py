"""What a decode's place in the context adds to its price, learned from live timings.

Every row of a decode attends over the whole context before it, so n rows at context
length P cost c(n) + k * n * P, not c(n). Timed on the Q4_K_M 1.5B target here (2 threads,
stop 56): 1 / 16 / 32 rows cost 31.6 / 267 / 433 ms after 64 tokens and 41.8 / 423 / 774 ms
after 2048, about 5 µs per row per context position at every size. A curve blind to that
learned its long sizes on the long copies of edit prompts (the only place they were bet)
and then priced every prompt's long bets at those prices (16 rows: 358 ms saved against
259 timed), and on a long prompt it priced them at a short one's.

k is fitted from the timings generation produces anyway, so nothing is timed for it: per
size, the lowest time seen in each band of BAND context positions (contention only adds
time, so a band's minimum is its quiet price), and k is the median over sizes of the slope
between a size's lowest and highest band at least MIN_GAP positions apart. Until two such
bands exist k stays what was saved (0 for a new curve): the curve prices as it did before.

A slope read over fewer positions is noisier (two runs on the same machine: 5.7 µs over
1,000 positions apart, 2.7 µs over 746), so a new estimate replaces the saved one only
when it was read over at least as much (its support: rows x positions apart, summed over
sizes); the saved support halves at each load, so a changed machine is re-learned.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

BAND = 256  # llama.cpp pads the attended cells to 256: finer bands see the same cost
MIN_GAP = 512  # the positions between two bands a slope is read over (less: noise wins)
MIN_SAMPLES = 3  # a band's minimum counts once it is the least of this many timings
MIN_ROWS = 2  # 1-row decodes move ~30 % over 2000 positions: within a noisy machine's jitter
# no quiet machine doubles a decode's price within this many positions of context (timed:
# x1.8 at 32 rows over 2000): a larger slope is contention that a band's minimum let through
MAX_DOUBLING = 1000
# the sizes whose timed price anchors a slope: a repacked Q4_K kernel takes rows in tiles,
# and a size between two tiles pays the rest row by row (15 rows 324 ms, 16 rows 260 ms),
# which the timed curve's monotone envelope hides (12 rows priced as 16)
TILES = (2, 4, 8, 16, 32, 64)


@dataclass
class SpanFit:
    """Per (rows, band): the lowest seconds seen, how many timings it is the least of, and
    the position it was seen at."""

    bands: dict[tuple[int, int], tuple[float, int, int]] = field(default_factory=dict)

    def add(self, n: int, seconds: float, pos: int) -> bool:
        """One live timing of n rows whose first row sat at context position `pos`; whether
        a slope may have changed (its band just settled, or a settled band's minimum fell):
        the caller re-reads the slope only then, not at every decode."""
        if n < MIN_ROWS:
            return False
        key = (n, pos // BAND)
        best, count, at = self.bands.get(key, (seconds, 0, pos))
        lower = seconds < best
        self.bands[key] = (seconds, count + 1, pos) if seconds <= best else (best, count + 1, at)
        return count + 1 == MIN_SAMPLES or (count + 1 > MIN_SAMPLES and lower)

    def slope(self, timed: dict[int, float] | None = None, depth: int = 0) -> tuple[float, float] | None:
        """(seconds per row per context position: the median over sizes, its support: the
        sum over those sizes of rows x positions apart, what the slope was read over), None
        while no size has two settled bands MIN_GAP apart.

        `timed`: a size's price timed after `depth` tokens (the curve's own timing, for the
        sizes whose cost is smooth in n: TILES), the low end of a size with one settled band
        only. Auto bets the sizes its curve prices best, which vary from prompt to prompt:
        on long prompts alone a size seldom had two settled bands, and k was never read."""
        by_rows: dict[int, list[tuple[int, float]]] = {}
        for (n, _band), (best, count, at) in self.bands.items():
            if count >= MIN_SAMPLES:
                by_rows.setdefault(n, []).append((at, best))
        slopes, support = [], 0.0
        for n, got in by_rows.items():
            lo, hi = min(got), max(got)
            if hi[0] - lo[0] < MIN_GAP and timed and n in timed:
                lo = (depth, timed[n])
            gap = hi[0] - lo[0]
            if gap >= MIN_GAP:
                k = (hi[1] - lo[1]) / (n * gap)
                slopes.append(min(max(k, 0.0), lo[1] / (n * MAX_DOUBLING)))
                support += n * gap
        return (statistics.median(slopes), support) if slopes else None
