"""`localspec costs show|clear`: the cost model's cached curves, listed and dropped.

The curves (seconds per decode of n tokens, per model file and placement) decide what
`auto` runs. They heal from live timings, but a user who moved the machine, changed a
driver or just wants to see what is assumed can look and start over here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from localspec.costmodel.curves import DEPTH, CostCurve, cache_dir
from localspec.errors import LocalspecError


def _curves() -> list[tuple[Path, CostCurve | None]]:
    out = []
    for p in sorted(cache_dir().glob("*.json")):
        if p.name.startswith("accept-"):
            continue
        try:
            out.append((p, CostCurve.from_json(json.loads(p.read_text()))))
        except (OSError, ValueError, KeyError, TypeError):
            out.append((p, None))
    return out


def cmd_show(a: argparse.Namespace) -> int:
    curves = _curves()
    accept = sorted(cache_dir().glob("accept-*.json"))
    if not curves and not accept:
        print(f"no cached costs in {cache_dir()} (they are timed on first use of `auto`)")
        return 0
    print(f"cost curves in {cache_dir()} (ms per decode of n tokens after "
          f"{DEPTH} of context; * healed from live timings):")
    for p, c in curves:
        if c is None:
            print(f"  {p.name}: unreadable (re-timed on next use)")
            continue
        cells = " ".join(f"{n}:{c(n) * 1e3:.1f}{'*' if n in c.healed else ''}" for n in (1, 2, 4, 8, 16, 32, 64)
                         if n <= c.sizes[-1])
        level = f" level x{c.scale:.2f}" if c.scale != 1.0 else ""
        # stale: never re-timed by itself (it heals live); --recalibrate or `clear` re-time it
        state = f" STALE (live timings disagree: healing{level}; --recalibrate re-times)" if c.stale else level
        # what a decode's place in the context adds (costmodel/span.py): learned live
        deeper = (f"\n    + {c.k * 1e6:.1f} µs per row per context token past {DEPTH} (16 rows at 2048: "
                  f"+{c.k * 16 * (2048 - DEPTH) * 1e3:.0f} ms)") if c.k else ""
        print(f"  {p.stem}{state}\n    {cells}{deeper}")
    for p in accept:
        try:
            d = json.loads(p.read_text())
            rate = d["accepted"] / d["trials"] if d.get("trials") else 0.0
            print(f"  {p.stem}: acceptance {rate:.2f} over {d.get('trials', 0):.0f} draft tokens")
        except (OSError, ValueError, KeyError, TypeError):
            print(f"  {p.stem}: unreadable")
    return 0


def cmd_clear(a: argparse.Namespace) -> int:
    files = [p for p, _ in _curves()] + (sorted(cache_dir().glob("accept-*.json")) if a.all else [])
    for p in files:
        try:
            p.unlink(missing_ok=True)
        except OSError as e:  # a read-only (shared, packaged) cache: one line, not a traceback
            raise LocalspecError(f"cannot drop {p}: {e.strerror or e}; this cache cannot be written "
                                 "(point LOCALSPEC_HOME at a writable directory to time anew)") from None
    kept = "" if a.all else " (acceptance history kept: --all drops it too)"
    print(f"dropped {len(files)} cached file(s) from {cache_dir()}{kept}; the next `auto` run re-times")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("costs", help="show or clear the cost model's cached timings (what auto decides with)")
    cs = c.add_subparsers(dest="costs_command", metavar="ACTION", required=True)
    s = cs.add_parser("show", help="list cached curves (ms per decode) and acceptance per pair")
    s.set_defaults(func=cmd_show)
    cl = cs.add_parser("clear", help="drop cached curves so the next run re-times them")
    cl.add_argument("--all", action="store_true", help="also drop the acceptance history of every pair")
    cl.set_defaults(func=cmd_clear)
