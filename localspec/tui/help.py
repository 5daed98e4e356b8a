"""The help overlay: keys and the colour legend, built from the same STYLES the text uses.

Why generated from STYLES: the legend can never drift from what the conversation shows.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from localspec.tui.transcript import STYLES

KEYS = (
    ("Enter", "send the message"),
    ("Esc", "stop the generation (after the current iteration)"),
    ("Ctrl+C", "stop the generation too; a second Ctrl+C within 3 s quits"),
    ("F2", "cycle the method for the next turn (auto, ar, sd, gbv, …, parse)"),
    ("F3", "show / hide rejected draft text"),
    ("F4", "fold / unfold the thinking blocks of a thinking model"),
    ("F5", "thinking for the next turn: auto, on, off (the template's enable_thinking)"),
    ("Ctrl+L", "new conversation (forgets the context)"),
    ("F1", "this help (Esc closes it)"),
    ("Ctrl+Q", "quit"),
)

LEGEND = (
    ("draft", "accepted", "drafted by the small model, accepted by the target"),
    ("ngram", "ngram", "a prompt lookup's draft, accepted (copied from the text so far)"),
    ("suffix", "suffix", "the suffix store's draft, accepted (copied from what the session saw)"),
    ("grammar", "grammar", "tokens the grammar / JSON schema forced (--grammar, -j): drafted free"),
    ("correction", "corrected", "target token sampled after a rejection"),
    ("bonus", "bonus", "target token after a fully accepted block"),
    ("target", "target", "written by the target alone (AR, PARSE regeneration)"),
    ("rejected", "rejected", "draft text the verifier threw away (F3 toggles)"),
    ("cut_pass", "‹0.93›", "PARSE cut point, judge score ≥ threshold"),
    ("cut_fail", "‹0.32›", "PARSE cut point, judge score < threshold"),
    ("tstar", "‹t* 0.81›", "PARSE chosen cut t*: text before it was kept"),
)


def help_text() -> Text:
    """Keys, then the legend: each sample is rendered in the style it describes."""
    t = Text()
    t.append("Keys\n", style="bold underline")
    for key, what in KEYS:
        t.append(f"  {key:<8}", style="bold")
        t.append(f"{what}\n")
    t.append("\nColours\n", style="bold underline")
    for style, sample, what in LEGEND:
        t.append("  ")
        t.append(sample, style=STYLES[style])
        t.append(" " * max(1, 12 - len(sample)))
        t.append(f"{what}\n")
    return t


class HelpScreen(ModalScreen[None]):
    """Modal so Esc closes it instead of reaching the app's stop action."""

    BINDINGS = [
        Binding("escape,f1,q", "dismiss", "Close"),
    ]
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > Vertical {
        width: 88;
        max-width: 100%;
        height: auto;
        border: round $primary;
        background: $surface;
        padding: 1 2;
    }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(help_text(), markup=False)
            yield Static(Text("Esc / F1 to close", style="dim"), markup=False)
