#!/usr/bin/env python
"""Generate docs/img/tui.svg: the TUI after a deterministic replay of two demo turns.

Why a replay and not a real model: the README picture must be reproducible byte for byte
(fixed timings, no blinking cursor, no model download), and must show every kind of span
(accepted from the draft model and from a prompt lookup, correction, bonus, target, rejected,
PARSE cuts and t*) in one frame.

    python scripts/make_screenshot.py            # writes docs/img/tui.svg
    python scripts/make_screenshot.py -o x.svg --size 120x36
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from localspec.config import GenConfig  # noqa: E402
from localspec.tui import LocalspecApp  # noqa: E402
from tests.support.replay import FakeSession, demo_turns, fake_factory, play_demo  # noqa: E402

TARGET = "SmolLM2-360M-Instruct-Q8_0"
DRAFT = "SmolLM2-135M-Instruct-Q4_0"


async def screenshot(size: tuple[int, int]) -> str:
    """Run the app headless, replay the demo, return the SVG."""
    fake = FakeSession(demo_turns(), target_name=TARGET, draft_name=DRAFT)
    app = LocalspecApp(fake_factory(fake), GenConfig(), title="localspec")
    async with app.run_test(size=size) as pilot:
        await play_demo(pilot)
        return app.export_screenshot(title="localspec chat")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "img" / "tui.svg")
    parser.add_argument("--size", default="120x36", help="terminal COLSxROWS (default 120x36)")
    args = parser.parse_args(argv)
    cols, rows = (int(x) for x in args.size.lower().split("x"))
    svg = asyncio.run(screenshot((cols, rows)))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(svg, encoding="utf-8")
    print(f"wrote {args.output} ({len(svg)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
