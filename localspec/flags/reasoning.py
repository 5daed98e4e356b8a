"""Thinking-model flags (llama.cpp's names) for `run`, `chat` and `serve`.

`--reasoning on|off|auto` (the template's enable_thinking where it has one; auto keeps the
template's default; `/think` and `/no_think` in a prompt pass through untouched),
`--reasoning-budget N` (thinking tokens before the close marker is forced, -1 = no limit,
see localspec.thinking.budget), and per command a `--reasoning-format`: run/chat `show`
(thinking on stderr, dimmed on a terminal; the answer on stdout), `hide` (thinking not
printed), `none` (the text as the model wrote it, markers included); serve
`auto|deepseek|none` (server/thinking.py). How run and chat print it: cli/reasoning.py.
"""

from __future__ import annotations

import argparse

RUN_FORMATS = ("show", "hide", "none")
SERVE_FORMATS = ("auto", "deepseek", "none")


def add_reasoning_args(p: argparse.ArgumentParser) -> None:
    """--reasoning and --reasoning-budget (every generating command)."""
    g = p.add_argument_group("thinking models (Qwen3, QwQ, DeepSeek-R1 distills)")
    g.add_argument("-rea", "--reasoning", choices=["on", "off", "auto"], default="auto",
                   help="thinking on/off through the chat template's enable_thinking; auto: the template's default")
    g.add_argument("--reasoning-budget", type=_budget, default=-1, metavar="N",
                   help="thinking tokens before the close marker is forced (not the model's choice) and the "
                   "answer starts; -1 = no limit, 0 = close at once (default -1)")


def add_reasoning_format_arg(p: argparse.ArgumentParser, *, server: bool = False) -> None:
    if server:
        p.add_argument("--reasoning-format", choices=SERVE_FORMATS, default="auto",
                       help="auto/deepseek: a thinking model's reasoning in message.reasoning_content "
                       "(llama-server's deepseek format); none: left in content (default auto)")
    else:
        p.add_argument("--reasoning-format", choices=RUN_FORMATS, default="show",
                       help="a thinking model's reasoning: show (stderr), hide, or none (not split: "
                       "printed as written, markers included) (default show)")


def _budget(text: str) -> int:
    """Checked while parsing, so a bad value is refused before any model loads."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer (got {text!r})") from None
    if n < -1:
        raise argparse.ArgumentTypeError(f"must be -1 (no limit) or >= 0 (got {n})")
    return n
