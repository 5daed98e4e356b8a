"""Textual TUI: watch speculation happen (accepted spans, rejected drafts, PARSE cuts, stats).

The TUI consumes `localspec.events` only, through a `Session` built by a factory the CLI
passes in; it never imports the backend, so it can be driven by a scripted `FakeSession`
(see `replay.py`) in tests and in the screenshot script.
"""

from __future__ import annotations

from localspec.tui.app import LocalspecApp, SessionFactory
from localspec.tui.run import run_tui

__all__ = ["LocalspecApp", "SessionFactory", "run_tui"]
