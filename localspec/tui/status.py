"""The input row: the prompt box and, above it, a status line that says why a key did nothing.

Why a line of its own and not a toast: a refused key (Ctrl+L while a reply is generating,
Enter before the models loaded) must be explained where the eye already is, and must not
cover the conversation; the line hides itself after a few seconds and takes no room while
hidden.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.timer import Timer
from textual.widgets import Input, Static

STATUS_SECONDS = 6.0  # how long a message stays


class PromptInput(Input):
    """The input box under the status line; its Enter binding is shown so the footer
    lists 'Send'."""

    BINDINGS = [Binding("enter", "submit", "Send", key_display="⏎")]


class StatusLine(Static):
    """Hidden until say(); `message` is what it shows now ("" when hidden)."""

    DEFAULT_CSS = """
    StatusLine {
        height: 1;
        padding: 0 1;
    }
    StatusLine.refused {
        color: $warning;
        text-style: bold;
    }
    """

    def __init__(self, **kw: object) -> None:
        super().__init__("", markup=False, **kw)  # type: ignore[arg-type]
        self.message = ""
        self._timer: Timer | None = None

    def on_mount(self) -> None:
        self.display = False

    def say(self, message: str, refused: bool = False, seconds: float = STATUS_SECONDS) -> None:
        self.message = message
        self.set_class(refused, "refused")
        self.update(Text(message))
        self.display = True
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(seconds, self.clear)

    def clear(self) -> None:
        self.message = ""
        self.display = False
