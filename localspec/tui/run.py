"""`localspec chat`'s entry into the TUI: run the app, close the session, return the exit code."""

from __future__ import annotations

from localspec.config import GenConfig
from localspec.tui.app import LocalspecApp, SessionFactory, Settle


def run_tui(session_factory: SessionFactory, cfg: GenConfig, title: str = "localspec",
            settle: Settle | None = None) -> int:
    """Run the app until it exits; the session it loaded is closed whatever happened."""
    app = LocalspecApp(session_factory, cfg, title=title, settle=settle)
    try:
        code = app.run()
    finally:
        if app.session is not None:
            app.session.close()
    return app.exit_code if code is None else int(code)
