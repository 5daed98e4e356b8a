"""Thinking-model output for `run` and `chat --plain`.

The answer goes to stdout; the reasoning by `--reasoning-format` (the flags, shared with
`serve`: localspec.flags.reasoning): `show` (stderr, dimmed on a terminal), `hide` (not
printed), `none` (the text as the model wrote it, markers included). `run --json` and the
stats line get the per-segment numbers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

from localspec.cli.spans import SpanLog
from localspec.events import Accepted, Done, Event, Progress, Written
from localspec.session import Session
from localspec.settings import Settings
from localspec.thinking.budget import ThinkingRun, think
from localspec.thinking.split import (
    ReasoningSplitter,
    markers_of,
    opens_block,
    segment_summary,
)

DIM, RESET = "\x1b[2m", "\x1b[0m"


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


def print_run(run: ThinkingRun, fmt: str, out: TextIO | None = None, err: TextIO | None = None,
              spans: SpanLog | None = None) -> Done:
    """Stream a ThinkingRun to the terminal; the Done event. `spans` collects who wrote what."""
    return _print(run if spans is None else spans.tap(run), lambda ev: run.take(), fmt, out, err)


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


def run_answer(session: Session, prompt: str | list[int], settings: Settings, *, raw: bool = False, fmt: str = "show",
               out: TextIO | None = None, err: TextIO | None = None,
               spans: SpanLog | None = None) -> tuple[Done, ThinkingRun]:
    """`run`'s generation: the prompt (chat-templated unless --raw) with the thinking settings
    (`spans`: collect who wrote each part, for --json)."""
    out, err = out or sys.stdout, err or sys.stderr  # looked up now: tests and pipes swap them
    kwargs = None if raw else settings.template_kwargs
    p = prompt if raw else [{"role": "user", "content": prompt}]
    run = think(session, p, settings.cfg, template_kwargs=kwargs, budget=settings.budget)
    return print_run(run, fmt, out, err, spans), run


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


def chat_turn(session: Session, line: str, settings: Settings, fmt: str = "show",
              out: TextIO | None = None, err: TextIO | None = None) -> Done:
    """One REPL turn: Session.chat with the thinking settings, printed split."""
    out, err = out or sys.stdout, err or sys.stderr  # looked up now: tests and pipes swap them
    kwargs = settings.template_kwargs
    events = session.chat(line, settings.cfg, template_kwargs=kwargs, reasoning_budget=settings.budget)
    splitter = ReasoningSplitter(markers_of(session), opens_block(session, kwargs))
    return print_events(events, splitter, fmt, out, err)
