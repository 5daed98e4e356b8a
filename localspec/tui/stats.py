"""The stats panel as a pure function of `Stats` (no Textual here).

Why pure: the panel is re-rendered on every coalesced flush, and tests (and the screenshot)
need it to be deterministic and checkable as text. Bars are drawn with block characters on
a FIXED scale (0..1 for acceptance, 0..max for counts) so that a flat acceptance of 0.9
does not look like a collapse, which an auto-scaled sparkline would suggest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rich.text import Text

from localspec.events import Stats
from localspec.tui.transcript import STYLES, accepted_kind

BLOCKS = "▁▂▃▄▅▆▇█"
BAR_BG = "on grey15"


@dataclass
class PanelInfo:
    """What the panel shows besides Stats: models, methods, state, session totals.

    `method` is what the next turn will ask for (F2 changes it); `turn_method` is what the
    current/last turn asked for, which Stats.method may refine (auto -> the chosen one).
    """

    target_name: str = "—"
    draft_name: str | None = None
    method: str = "auto"
    turn_method: str | None = None
    state: str = "loading"
    session_tokens: int = 0
    session_seconds: float = 0.0
    turns: int = 0
    placement: dict[str, str] = field(default_factory=dict)  # "target"/"draft" -> "CUDA0 29/29 layers"

    @property
    def session_tok_per_s(self) -> float:
        """Cumulative over all finished turns, so one fast burst does not dominate."""
        return self.session_tokens / self.session_seconds if self.session_seconds > 0 else 0.0


def mean_tau(stats: Stats) -> float:
    """Mean accepted draft length per verification (mean τ)."""
    a = stats.accepted_lengths
    return sum(a) / len(a) if a else 0.0


def acceptance_rate(stats: Stats) -> float | None:
    """α: accepted draft tokens / draft tokens that reached verification (None: no data)."""
    trials = sum(stats.position_trials)
    return sum(stats.position_accepts) / trials if trials else None


def fit(
    values: Sequence[float], width: int, agg: Callable[[Sequence[float]], float]
) -> list[float]:
    """Squeeze values into at most `width` buckets (PARSE can have hundreds of positions)."""
    n = len(values)
    if n <= width:
        return list(values)
    out = []
    for i in range(width):
        lo, hi = i * n // width, (i + 1) * n // width
        out.append(agg(values[lo:hi]))
    return out


def bars(values: Sequence[float], vmax: float) -> str:
    """One block character per value on the scale 0..vmax; exact zero is a blank cell."""
    if vmax <= 0:
        return " " * len(values)
    chars = []
    for v in values:
        if v <= 0:
            chars.append(" ")
            continue
        level = min(len(BLOCKS) - 1, max(0, round(v / vmax * (len(BLOCKS) - 1))))
        chars.append(BLOCKS[level])
    return "".join(chars)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def time_split(stats: Stats, width: int) -> Text:
    """A stacked bar draft | verify | overhead and the three percentages."""
    parts = [
        ("draft", stats.draft_seconds, "#98c379"),
        ("verify", stats.verify_seconds, "#c678dd"),
        ("other", stats.overhead_seconds, "grey50"),
    ]
    total = sum(p[1] for p in parts)
    text = Text()
    if total <= 0:
        text.append(" " * width, style=BAR_BG)
        text.append("\n no timing yet", style="dim")
        return text
    used = 0
    for i, (_, secs, colour) in enumerate(parts):
        cells = width - used if i == len(parts) - 1 else round(secs / total * width)
        cells = max(0, min(cells, width - used))
        text.append("█" * cells, style=colour)
        used += cells
    text.append("\n")
    for name, secs, colour in parts:
        text.append(f" {name} ", style=colour)
        text.append(f"{secs / total:.0%} ")
    return text


def proposer_split(text: Text, stats: Stats) -> None:
    """Accepted / drafted tokens and their ratio per proposer, each name in the colour its
    accepted text has in the conversation; only once a lookup drafted (with the draft model
    alone, accept α above already is its acceptance)."""
    if not stats.lookup_drafted:
        return
    text.append(" by proposer: accepted / drafted\n", style="dim")
    for name, (drafted, accepted) in stats.by_proposer().items():
        if drafted:
            colour = STYLES[accepted_kind(name)].replace("underline", "").strip()
            text.append(f"   {name:<8}", style=colour)
            text.append(f"{accepted:5d} / {drafted:<5d}{accepted / drafted:5.0%}\n")


def _row(text: Text, label: str, value: str, style: str = "") -> None:
    text.append(f" {label:<10}", style="dim")
    text.append(value + "\n", style=style)


def render_stats(stats: Stats | None, info: PanelInfo, width: int = 30) -> Text:
    """The whole panel. `stats` is the latest snapshot of the current/last turn."""
    t = Text()
    t.append("Models\n", style="bold underline")
    _row(t, "target", info.target_name)
    _row(t, "draft", info.draft_name or "— (none)")
    _row(t, "state", info.state, "bold" if info.state == "generating" else "")

    t.append("\nMethod\n", style="bold underline")
    asked = info.turn_method or info.method
    ran = (stats.ran or stats.method) if stats else None
    _row(t, "method", asked if ran in (None, asked) else f"{asked} → {ran}", "bold #56b6c2")
    if info.method != asked:
        _row(t, "next turn", info.method, "bold")
    plain = ran == "ar"  # plain decoding: one token per target call, nothing drafted
    if stats is not None:
        if plain:
            _row(t, "K L τ", "— (plain decoding: no drafts)")
        else:
            _row(t, "K L τ", f"K={stats.K}  L={stats.L}  mean τ={mean_tau(stats):.2f}")
        if stats.choice_note:
            t.append(f" auto: {stats.choice_note}\n", style="italic")
    for role, where in info.placement.items():
        _row(t, role, where, "dim")

    t.append("\nSpeed\n", style="bold underline")
    if stats is None:
        t.append(" no generation yet\n", style="dim")
    else:
        _row(t, "tok/s", f"{stats.tok_per_s:6.1f}  this turn", "bold")
        if info.turns:
            _row(t, "tok/s", f"{info.session_tok_per_s:6.1f}  session")
        if stats.ar_estimate > 0 and stats.tok_per_s > 0 and not plain:
            # AR was not run this turn: its speed is the cost model's prediction, said so,
            # and so are prices a busy machine set (contended) or a timing far off (stale)
            why = "contended or stale prices" if stats.prices else "cost model"
            _row(t, "speedup", f"{stats.tok_per_s / stats.ar_estimate:6.2f}x vs AR {stats.ar_estimate:.1f} tok/s "
                 f"predicted ({why})")
            if stats.prices:
                t.append(f" prices: {stats.prices}\n", style="italic #e5c07b")
        expected = stats.forecast_tok_per_s
        if expected is not None and not plain:  # the estimates' forecast of the iterations that ran
            _row(t, "forecast", f"{expected:6.1f}  tok/s the cost model expected")
        _row(t, "block eff", f"{stats.block_efficiency:6.2f}  tok/target call")
        alpha = acceptance_rate(stats)
        _row(t, "accept α", "   —" if alpha is None else f"{alpha:6.0%}")
        proposer_split(t, stats)
        _row(t, "tokens", f"{stats.n_tokens:6d}  in {stats.iterations} iter")

        hist = stats.histogram()
        if stats.accepted_lengths:
            t.append("\n accepted length τ (0..L)\n", style="dim")
            h = fit([float(x) for x in hist], width, sum)
            t.append(" ")
            t.append(bars(h, max(h)), style=f"#98c379 {BAR_BG}")
            t.append(f"  max {len(hist) - 1}\n", style="dim")
        pos = stats.position_acceptance()
        if pos:
            t.append(" acceptance by position (0..1)\n", style="dim")
            p = fit(pos, width, _mean)
            t.append(" ")
            t.append(bars(p, 1.0), style=f"#56b6c2 {BAR_BG}")
            t.append(f"  {len(pos)} pos\n", style="dim")

        t.append("\nTime\n", style="bold underline")
        t.append(" ")
        t.append_text(time_split(stats, width))
        t.append("\n")
    return t
