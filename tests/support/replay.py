"""A Session that replays scripted events, and a deterministic demo script.

Why: the TUI must be testable (and screenshotted) without a model. `FakeSession` follows
the `Session` contract (chat yields events ending with Done, stop() is thread-safe and ends
the generation after the current event) and records what the app asked of it, so tests can
observe Esc -> stop() and method cycling -> cfg.method.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from textual.widgets import Input

from localspec.config import GenConfig
from localspec.events import (
    Accepted,
    Cut,
    Done,
    Drafted,
    Event,
    Judged,
    Provenance,
    Rejected,
    Stats,
    StatsUpdate,
    Written,
)
from localspec.session import ProgressFn, Session, StopFlag

if TYPE_CHECKING:
    from textual.pilot import Pilot

Script = Sequence[Event]


class FakeSession(Session):
    """Replays `turns[i]` for the i-th chat() call (the last script repeats).

    delay: seconds slept before each event (simulates generation speed).
    hold_after: after yielding that many events of a turn, wait until stop() is called,
    so a test can press Esc at a known point instead of racing a timer.
    """

    def __init__(
        self,
        turns: Sequence[Script],
        *,
        delay: float = 0.0,
        hold_after: int | None = None,
        target_name: str = "fake-target",
        draft_name: str | None = "fake-draft",
    ) -> None:
        self.turns = list(turns)
        self.delay = delay
        self.hold_after = hold_after
        self.target_name = target_name
        self.draft_name = draft_name
        self.prompts: list[str] = []
        self.configs: list[GenConfig] = []
        self.stop_calls = 0
        self.resets = 0
        self.closed = False
        self._stop = StopFlag()

    def chat(self, user_text: str, cfg: GenConfig) -> Iterator[Event]:
        self._stop.clear()
        self.prompts.append(user_text)
        self.configs.append(replace(cfg))
        script = self.turns[min(len(self.prompts) - 1, len(self.turns) - 1)] if self.turns else []
        text = ""
        stats = Stats(method=cfg.method)
        for i, ev in enumerate(script):
            if self.hold_after is not None and i == self.hold_after:
                while not self._stop.is_set():
                    time.sleep(0.005)
            if self._stop.is_set():
                yield Done("interrupted", text, stats, "stopped by user")
                return
            if self.delay:
                time.sleep(self.delay)
            if isinstance(ev, (Accepted, Written)):
                text += ev.text
            elif isinstance(ev, StatsUpdate):
                stats = ev.stats
            yield ev
            if isinstance(ev, Done):
                return
        yield Done("eog", text, stats)

    def complete(self, prompt: str, cfg: GenConfig, *, chat: bool = True) -> Iterator[Event]:
        return self.chat(prompt, cfg)

    def stop(self) -> None:
        self.stop_calls += 1
        self._stop.set()

    def reset(self) -> None:
        self.resets += 1

    def close(self) -> None:
        self.closed = True


def fake_factory(
    session: Session,
    steps: Sequence[tuple[str, float]] = (("loading target", 0.5), ("loading draft", 1.0)),
    *,
    error: Exception | None = None,
    step_delay: float = 0.0,
) -> Callable[[ProgressFn], Session]:
    """A session_factory that reports progress steps, then returns `session` or raises."""

    def factory(progress: ProgressFn) -> Session:
        for message, fraction in steps:
            progress(message, fraction)
            if step_delay:
                time.sleep(step_delay)
        if error is not None:
            raise error
        return session

    return factory


# --- deterministic demo ---------------------------------------------------------------------

Iteration = tuple[Sequence[str], Sequence[str], str, Provenance]
"""(accepted draft tokens, rejected draft tokens, target-written text, its provenance)."""


def block_turn(
    iterations: Sequence[Iteration],
    *,
    method: str,
    K: int,
    L: int,
    choice_note: str = "",
    step_seconds: tuple[float, float, float] = (0.030, 0.045, 0.006),
    lookups: Mapping[int, str] | None = None,
) -> list[Event]:
    """Events of a block-verification turn, with Stats consistent with the script.

    `lookups` maps an iteration's index to the model-free proposer that drafted it ("ngram",
    "suffix"): one point-mass draft as long as what it lists, no draft call, counted in
    Stats.proposed (as decode/speculative.py does)."""
    stats = Stats(method=method, K=K, L=L, prompt_tokens=24, choice_note=choice_note)
    events: list[Event] = []
    tok = 1000
    answer = ""
    for i, (accepted, rejected, written, kind) in enumerate(iterations):
        source = (lookups or {}).get(i, "draft")
        drafted = [*accepted, *rejected]
        ids = tuple(range(tok, tok + len(drafted)))
        tok += len(drafted)
        alt = ids[: len(accepted)]  # a second draft sharing the accepted prefix
        if source == "draft":
            events.append(Drafted((ids, alt), ("".join(drafted), "".join(accepted))))
        else:
            events.append(Drafted((ids,), ("".join(drafted),), source))
        tau = len(accepted)
        events.append(Accepted(0, tau, ids[:tau], "".join(accepted), source))
        if rejected:
            events.append(Rejected(0, ids[tau:], "".join(rejected), source))
        if written:
            events.append(Written((tok,), written, kind))
            tok += 1
        answer += "".join(accepted) + written
        d, v, o = step_seconds
        if source == "draft":
            stats.record(tau, L)
            stats.draft_calls += L
        else:
            stats.record(tau, len(drafted))
            stats.record_proposed(source, len(drafted), tau)
            d = 0.0005  # a lookup: a few dict probes, no model call
        stats.n_tokens += tau + (1 if written else 0)
        stats.iterations += 1
        stats.target_calls += 1
        stats.draft_seconds += d
        stats.verify_seconds += v
        stats.overhead_seconds += o
        stats.seconds += d + v + o
        events.append(StatsUpdate(stats.copy()))
    events.append(Done("eog", answer, stats.copy()))
    return events


def parse_turn(
    drafted: str,
    cut_texts: Sequence[str],
    scores: Sequence[float],
    star: int,
    regenerated: Sequence[str],
    *,
    threshold: float = 0.5,
) -> list[Event]:
    """Events of a PARSE turn: one drafted answer, judged cuts, kept prefix, regeneration.

    cut_texts[i] is the drafted prefix ending cut i; `star` indexes the chosen cut.
    """
    cut_chars = tuple(len(c) for c in cut_texts) + (len(drafted),)
    n_draft = max(1, len(drafted) // 4)
    cuts = tuple(min(n_draft, c // 4) for c in cut_chars)
    ids = tuple(range(2000, 2000 + n_draft))
    char_star, t_star = cut_chars[star], cuts[star]
    stats = Stats(method="parse", K=1, L=n_draft, prompt_tokens=40, choice_note="")
    events: list[Event] = [
        Drafted((ids,), (drafted,)),
        Judged("likelihood", cuts, cut_chars, tuple(scores), threshold),
        Cut(t_star, n_draft, char_star),
        Accepted(0, t_star, ids[:t_star], drafted[:char_star]),
        Rejected(0, ids[t_star:], drafted[char_star:]),
    ]
    stats.record(t_star, n_draft)
    stats.n_tokens, stats.iterations, stats.target_calls = t_star, 1, 1
    stats.draft_calls = n_draft
    stats.draft_seconds, stats.verify_seconds, stats.overhead_seconds = 0.21, 0.09, 0.01
    events.append(StatsUpdate(stats.copy()))
    for piece in regenerated:
        events.append(Written((3000,), piece, "target"))
        stats.n_tokens += 1
        stats.verify_seconds += 0.035
    stats.target_calls += len(regenerated)
    stats.seconds = stats.draft_seconds + stats.verify_seconds + stats.overhead_seconds
    events.append(StatsUpdate(stats.copy()))
    events.append(Done("eog", drafted[:char_star] + "".join(regenerated), stats.copy()))
    return events


DEMO_PROMPTS = (
    "Write a Python function that reverses a string.",
    "Make it return None for None input.",
)


def demo_turns() -> list[list[Event]]:
    """Two turns: multi-draft block verification with a prompt lookup (`--spec-type
    ngram,draft`: "function that reverses a" is copied from the prompt), then PARSE with a
    rejected tail."""
    turn1: list[Iteration] = [
        (["Here", " is", " a"], [" simple"], " Python", "correction"),
        ([" function", " that", " reverses", " a"], [], " string", "bonus"),  # the prompt lookup
        ([":\n\n", "```python", "\n"], ["import"], "def", "correction"),
        ([" reverse", "(s", ":", " str"], [], ")", "bonus"),
        ([" ->", " str", ":\n", "    return"], [], " s", "bonus"),
        (["[::-", "1", "]\n", "```"], [], "\n\n", "bonus"),
        ([], ["This", " uses", " slicing"], "Slicing", "correction"),
        ([" with", " a", " step", " of"], [], " -", "bonus"),
        (["1", " walks", " the", " string"], [], " backwards", "bonus"),
        (["."], [" It", " is", " fast"], "", "correction"),
    ]
    note = "mdbv K=2 L=4: predicted 41 tok/s vs AR 24 tok/s"
    t1 = block_turn(turn1, method="mdbv", K=2, L=4, choice_note=note, lookups={1: "ngram"})
    drafted = (
        "Sure:\n\n```python\ndef reverse(s):\n    if s is None:\n        return None\n"
        "    return s.reverse()\n```"
    )
    marks = [
        "Sure:\n\n",
        "```python\n",
        "def reverse(s):\n",
        "    if s is None:\n",
        "        return None\n",
        "    return s",
    ]
    prefixes = ["".join(marks[: i + 1]) for i in range(len(marks))]
    t2 = parse_turn(
        drafted,
        prefixes,
        scores=(0.97, 0.95, 0.93, 0.88, 0.81, 0.32, 0.12),
        star=4,
        regenerated=["    return", " s", "[::-1]", "\n```"],
    )
    return [t1, t2]


# --- driving an app (tests and scripts/make_screenshot.py) --------------------------------


async def wait_until(
    pilot: Pilot, predicate: Callable[[], object], timeout: float = 10.0, step: float = 0.02
) -> None:
    """Pause the pilot until predicate() is true; fail loudly instead of hanging a test."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        await pilot.pause(step)


async def send_and_wait(pilot: Pilot, text: str, timeout: float = 10.0) -> None:
    """Type `text` into the prompt, press Enter, wait until the turn has finished."""
    app = pilot.app
    await wait_until(pilot, lambda: getattr(app, "session", None) is not None, timeout)
    app.query_one("#prompt", Input).value = text
    await pilot.press("enter")
    await wait_until(pilot, lambda: not app.generating and not app.pending(), timeout)


async def play_demo(pilot: Pilot) -> None:
    """Send the demo prompts and settle the screen (deterministic: no blinking cursor)."""
    for prompt in DEMO_PROMPTS:
        await send_and_wait(pilot, prompt)
    pilot.app.query_one("#prompt", Input).cursor_blink = False
    await pilot.pause()
