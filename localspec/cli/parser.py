"""The argparse pieces every `localspec` command shares: terse errors, defaults shown once.

Why a subclass: argparse's own error() prints the whole usage block (13 lines for `run`)
before the one line that matters; a newcomer reads the usage and misses the error. Here a
parse error is the CLI's usual one line (exit 2) with the hint folded into it.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line: `PROG: error: WHAT; see `PROG --help``.

    Sub-parsers made with add_subparsers() inherit the class (argparse uses type(self)).
    """

    def error(self, message: str) -> NoReturn:
        what = " ".join(message.split())  # argparse messages are one line; make sure
        self.exit(2, f"{self.prog}: error: {what}; see `{self.prog} --help`\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Appends "(default: X)" once, only where the help text does not already say it.

    ArgumentDefaultsHelpFormatter appends it to every option, so help strings that name
    their default read "(default 4096) (default: 4096)", and flags without a meaningful
    default read "(default: None)". Descriptions and epilogs (examples) keep their layout.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if (
            "default" in text.lower()
            or not action.option_strings
            or d is None
            or d is False
            or d is argparse.SUPPRESS
            or (isinstance(d, list) and not d)
        ):
            return text
        return f"{text} (default: %(default)s)"
