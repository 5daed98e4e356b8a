"""Thinking-model flags and output for `run`, `chat --plain` and `serve`.

Flags (llama.cpp's names): `--reasoning on|off|auto` (the template's enable_thinking where
it has one; auto keeps the template's default; `/think` and `/no_think` in a prompt pass
through untouched), `--reasoning-budget N` (thinking tokens before the close marker is
forced, -1 = no limit, see localspec.thinking.budget), and per command a
`--reasoning-format`: run/chat `show` (thinking on stderr, dimmed on a terminal; the
answer on stdout), `hide` (thinking not printed), `none` (the text as the model wrote it,
markers included); serve `auto|deepseek|none` (server/thinking.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TextIO

from localspec.config import GenConfig
from localspec.events import Accepted, Done, Event, Progress, Written
from localspec.session import Session
from localspec.thinking.budget import ThinkingRun, think
from localspec.thinking.split import (
    ReasoningSplitter,
    markers_of,
    opens_block,
    segment_summary,
    thinking_kwargs,
)

RUN_FORMATS = ("show", "hide", "none")
SERVE_FORMATS = ("auto", "deepseek", "none")
SAMPLING_DESTS = ("temp", "top_k", "top_p", "min_p")
DIM, RESET = "\x1b[2m", "\x1b[0m"


def add_reasoning_args(p: argparse.ArgumentParser) -> None:
    """--reasoning and --reasoning-budget (every generating command), and a record of which
    sampling flags the user typed (for localspec.sampling_defaults: a typed flag wins)."""
    g = p.add_argument_group("thinking models (Qwen3, QwQ, DeepSeek-R1 distills)")
    g.add_argument("-rea", "--reasoning", choices=["on", "off", "auto"], default="auto",
                   help="thinking on/off through the chat template's enable_thinking; auto: the template's default")
    g.add_argument("--reasoning-budget", type=_budget, default=-1, metavar="N",
                   help="thinking tokens before the close marker is forced (not the model's choice) and the "
                   "answer starts; -1 = no limit, 0 = close at once (default -1)")
    _record_typed(p)


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


class _Typed(argparse.Action):
    """Marks an option as typed by the user, then stores it as the original action would."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        typed = set(getattr(namespace, "_typed_sampling", set()))
        typed.add(self.dest)
        namespace._typed_sampling = typed
        setattr(namespace, self.dest, values)


def _record_typed(p: argparse.ArgumentParser) -> None:
    # swap the class of the already-defined --temp/--top-k/--top-p/--min-p store actions:
    # same flags, same defaults, same help; only the user's typing is remembered
    for action in p._actions:  # noqa: SLF001 - argparse keeps no public list of actions
        if action.dest in SAMPLING_DESTS and type(action) is argparse._StoreAction:  # noqa: SLF001
            action.__class__ = _Typed


def typed_sampling(a: argparse.Namespace) -> dict[str, float | None]:
    """The sampling flags the user typed (None for those left at their default)."""
    typed = getattr(a, "_typed_sampling", set())
    return {d: (getattr(a, d) if d in typed else None) for d in SAMPLING_DESTS}


def budget_of(a: argparse.Namespace) -> int | None:
    """The budget, None for no limit (-1; values below were refused while parsing: _budget)."""
    n = getattr(a, "reasoning_budget", -1)
    return None if n is None or n == -1 else n


def template_kwargs_of(session: Session, a: argparse.Namespace) -> dict[str, object]:
    return thinking_kwargs(session, getattr(a, "reasoning", "auto"))


class Printer:
    """Writes a generation's pieces: answer to `out`, reasoning to `err` (show) or nowhere."""

    def __init__(self, fmt: str, out: TextIO, err: TextIO) -> None:
        self.fmt = fmt
        self.out = out
        self.err = err
        self.dim = err.isatty() if hasattr(err, "isatty") else False
        self._in_reasoning = False

    def piece(self, segment: str, text: str) -> None:
        if not text:
            return
        if segment == "reasoning":
            if self.fmt == "show":
                if not self._in_reasoning:
                    self.err.write((DIM if self.dim else "") + "[thinking]\n")
                    self._in_reasoning = True
                self.err.write(text)
                self.err.flush()
            return
        self._close()
        self.out.write(text)
        self.out.flush()

    def _close(self) -> None:
        if self._in_reasoning:
            self.err.write("\n[/thinking]" + (RESET if self.dim else "") + "\n")
            self.err.flush()
            self._in_reasoning = False

    def raw(self, ev: Event) -> None:
        if isinstance(ev, Accepted | Written) and ev.text:
            self.out.write(ev.text)
            self.out.flush()

    def end(self) -> None:
        self._close()


def show_progress(ev: Event, err: TextIO) -> None:
    """A Progress event (the cost model timing this machine, once) as one updating line on a
    terminal, or its first and last step otherwise, on stderr: never silent for seconds."""
    if not isinstance(ev, Progress):
        return
    done = ev.fraction >= 1.0
    if err.isatty():
        err.write(f"\r{ev.message}" + ("\n" if done else ""))
    elif done or ev.message.split(":")[-1].strip().startswith("1/"):
        err.write(ev.message + "\n")
    err.flush()


def print_run(run: ThinkingRun, fmt: str, out: TextIO | None = None, err: TextIO | None = None) -> Done:
    """Stream a ThinkingRun to the terminal; the Done event."""
    return _print(run, lambda ev: run.take(), fmt, out, err)


def print_events(events: Iterable[Event], splitter: ReasoningSplitter, fmt: str,
                 out: TextIO | None = None, err: TextIO | None = None) -> Done:
    """Stream plain events (e.g. Session.chat's) through a splitter."""
    return _print(events, lambda ev: splitter.feed(ev) + (splitter.finish() if isinstance(ev, Done) else []),
                  fmt, out, err)


def _print(events: Iterable[Event], pieces_of, fmt: str, out: TextIO | None, err: TextIO | None) -> Done:
    """The one printing loop: progress on stderr, each event's (segment, text) pieces to the
    printer (or raw events for --reasoning-format none); returns the Done event."""
    out, err = out or sys.stdout, err or sys.stderr  # looked up now: tests and pipes swap them
    printer = Printer(fmt, out, err)
    done = None
    for ev in events:
        show_progress(ev, err)
        if fmt == "none":
            printer.raw(ev)
        pieces = pieces_of(ev)  # always taken: the splitter/run keep their state in step
        if fmt != "none":
            for p in pieces:
                printer.piece(p.segment, p.text)
        if isinstance(ev, Done):
            done = ev
    printer.end()
    assert done is not None
    return done


def run_answer(session: Session, prompt: str, cfg: GenConfig, a: argparse.Namespace,
               out: TextIO | None = None, err: TextIO | None = None) -> tuple[Done, ThinkingRun]:
    """`run`'s generation: the prompt (chat-templated unless --raw) with the thinking flags."""
    out, err = out or sys.stdout, err or sys.stderr  # looked up now: tests and pipes swap them
    kwargs = None if a.raw else template_kwargs_of(session, a)
    p = prompt if a.raw else [{"role": "user", "content": prompt}]
    run = think(session, p, cfg, template_kwargs=kwargs, budget=budget_of(a))
    fmt = getattr(a, "reasoning_format", "show")
    return print_run(run, fmt, out, err), run


def json_fields(run: ThinkingRun, done: Done, fmt: str = "show") -> dict:
    """`run --json`: `text` the answer, `reasoning` the thinking (null: not a thinking model
    or --reasoning-format none), per-segment stats, and the forced close if the budget
    ended the thinking."""
    if run.markers is None or fmt == "none":
        return {"text": done.text, "reasoning": None}
    sp = run.splitter
    return {"text": sp.answer, "reasoning": sp.reasoning, "reasoning_forced": run.forced or None,
            "segments": {k: v.to_json() for k, v in sp.stats.items()}}


def summary(run: ThinkingRun, speculative: bool) -> str | None:
    """`[thought for N tokens, X s, block eff Y]` for the stats line (None: no thinking)."""
    if run.markers is None or not run.splitter.opened:
        return None
    return "[" + segment_summary(run.splitter.stats["reasoning"], speculative=speculative) + "]"


def chat_turn(session: Session, line: str, cfg: GenConfig, a: argparse.Namespace,
              out: TextIO | None = None, err: TextIO | None = None) -> Done:
    """One REPL turn: Session.chat with the thinking flags, printed split."""
    out, err = out or sys.stdout, err or sys.stderr  # looked up now: tests and pipes swap them
    kwargs = template_kwargs_of(session, a)
    events = session.chat(line, cfg, template_kwargs=kwargs, reasoning_budget=budget_of(a))
    splitter = ReasoningSplitter(markers_of(session), opens_block(session, kwargs))
    return print_events(events, splitter, getattr(a, "reasoning_format", "show"), out, err)


def model_sampling(session: Session, target: str | None, a: argparse.Namespace):
    """The sampling localspec.sampling_defaults resolves for this target: typed flags, then
    the registry's set for the thinking mode in force, then the GGUF, then llama.cpp's."""
    from localspec.sampling_defaults import resolve_for

    thinking = None if markers_of(session) is None else getattr(a, "reasoning", "auto") != "off"
    return resolve_for(session, target, typed_sampling(a), thinking)


def sampling_note(session: Session, target: str | None, a: argparse.Namespace, cfg: GenConfig) -> str:
    """`--explain`'s sampling line: the settings in force and where each came from (a typed
    flag, the registry's set for the thinking mode, the GGUF, llama.cpp's defaults)."""
    rec = model_sampling(session, target, a)
    line = "in force: " + rec.describe()
    if rec.sampling != cfg.sampling:  # a frontend changed it after resolving
        sp = cfg.sampling
        line += f"; the turn runs with temp={sp.temp:g} top_k={sp.top_k} top_p={sp.top_p:g} min_p={sp.min_p:g}"
    return line


def apply_model_sampling(session: Session, target: str | None, a: argparse.Namespace, cfg: GenConfig) -> None:
    """Replace the sampling flags the user did not type by the model's own (in place: the TUI
    and the server keep the same cfg object). Greedy is no longer the default: Qwen3's card
    warns against it in thinking mode, and speculation is lossless at any temperature."""
    cfg.sampling = model_sampling(session, target, a).sampling
    cfg.sampling.validate()
