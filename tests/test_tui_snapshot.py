"""Snapshot of the TUI after the deterministic demo replay (pytest-textual-snapshot).

The replay carries fixed timings and the cursor blink is switched off, so the SVG is
byte-stable; regenerate with `python -m pytest tests/test_tui_snapshot.py --snapshot-update`
after an intended visual change and review the diff.
"""

from __future__ import annotations

from localspec.config import GenConfig
from localspec.tui import LocalspecApp
from tests.support.replay import FakeSession, demo_turns, fake_factory, play_demo

TARGET = "SmolLM2-360M-Instruct-Q8_0"
DRAFT = "SmolLM2-135M-Instruct-Q4_0"


def demo_app() -> LocalspecApp:
    fake = FakeSession(demo_turns(), target_name=TARGET, draft_name=DRAFT)
    return LocalspecApp(fake_factory(fake), GenConfig(), title="localspec")


def test_demo_snapshot(snap_compare) -> None:
    assert snap_compare(demo_app(), terminal_size=(120, 36), run_before=play_demo)


def test_demo_snapshot_rejected_hidden(snap_compare) -> None:
    assert snap_compare(demo_app(), terminal_size=(120, 36), run_before=play_demo, press=["f3"])
