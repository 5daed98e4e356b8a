"""What worker threads hand the UI thread (the inbox items), and small text helpers.

Workers never touch widgets (see app.py); they post these, and the UI timer drains them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from localspec.config import GenConfig
from localspec.errors import LocalspecError
from localspec.events import Event
from localspec.session import Session


@dataclass
class _Progress:
    message: str
    fraction: float


@dataclass
class _Loaded:
    session: Session
    cfg: GenConfig | None = None  # the settled settings (localspec.settings.resolve), if any


@dataclass
class _Failed:
    message: str
    loading: bool


@dataclass
class _Finished:
    """The generation worker returned (with or without a Done event)."""


Inbox = Event | _Progress | _Loaded | _Failed | _Finished

BAR_WIDTH = 24  # the side panel is 40 columns wide (app.tcss)
CTRL_C_WINDOW = 3.0  # seconds in which a second Ctrl-C quits

DONE_NOTES = {
    "interrupted": "⏹ stopped",
    "max_tokens": "… n_predict reached",
    "context_full": "⚠ context full",
}


def short_name(name: str | None) -> str | None:
    """A model path is shown by its file name: the panel is 40 columns wide."""
    return re.split(r"[\\/]", name)[-1] if name else name


def describe_error(exc: BaseException) -> str:
    """A readable one-liner: LocalspecError messages already name the fix."""
    if isinstance(exc, LocalspecError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
