"""Pilot tests of the Textual app, driven by scripted event streams (no model)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator

import pytest
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import Input, ProgressBar, Static

from localspec.config import METHODS, GenConfig
from localspec.errors import ContextFullError, ModelNotFoundError
from localspec.events import Done, Event, Stats, Written
from localspec.session import ProgressFn, Session
from localspec.tui import LocalspecApp
from localspec.tui.help import HelpScreen
from localspec.tui.transcript import STYLES
from tests.support.replay import (
    DEMO_PROMPTS,
    FakeSession,
    demo_turns,
    fake_factory,
    send_and_wait,
    wait_until,
)

SIZE = (120, 40)


def run_app(app: LocalspecApp, body: Callable[[Pilot], Awaitable[None]]) -> None:
    """Run `body` against the app in a headless pilot (plain asyncio: no plugin needed)."""

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await body(pilot)

    asyncio.run(main())


def answer_text(app: LocalspecApp, index: int = -1) -> Text:
    widget = app.query(".answer").nodes[index]
    assert isinstance(widget, Static)
    content = widget.content
    assert isinstance(content, Text)
    return content


def runs(text: Text) -> list[tuple[str, str]]:
    return [(text.plain[s.start : s.end], str(s.style)) for s in text.spans]


def stats_text(app: LocalspecApp) -> str:
    content = app.query_one("#stats", Static).content
    assert isinstance(content, Text)
    return content.plain


def demo_app(**kw: object) -> tuple[LocalspecApp, FakeSession]:
    fake = FakeSession(demo_turns(), target_name="T-360M", draft_name="D-135M", **kw)  # type: ignore[arg-type]
    return LocalspecApp(fake_factory(fake), GenConfig()), fake


def test_loading_shows_progress_then_enables_input() -> None:
    gate = threading.Event()
    fake = FakeSession(demo_turns())

    def factory(progress: ProgressFn) -> Session:
        progress("loading target T-360M", 0.4)
        gate.wait(5)
        return fake

    app = LocalspecApp(factory, GenConfig())

    async def body(pilot: Pilot) -> None:
        message = app.query_one("#loading-message", Static)
        await wait_until(pilot, lambda: "loading target" in str(message.content))
        assert app.query_one("#loading-bar", ProgressBar).progress == pytest.approx(0.4)
        assert app.query_one("#prompt", Input).disabled  # no session yet
        gate.set()
        await wait_until(pilot, lambda: app.session is fake)
        assert not app.query_one("#prompt", Input).disabled
        assert not app.query_one("#loading").display

    run_app(app, body)


def test_factory_error_is_shown_readably() -> None:
    err = ModelNotFoundError("model 'nope' is not in models.toml: run `localspec models`")
    app = LocalspecApp(fake_factory(FakeSession([]), error=err), GenConfig())

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.error is not None)
        await pilot.pause()
        box = app.query_one("#error", Static)
        assert box.display
        assert "run `localspec models`" in str(box.content)
        assert "Traceback" not in str(box.content)
        assert app.query_one("#prompt", Input).disabled
        assert "error" in stats_text(app)
        await pilot.press("ctrl+q")

    run_app(app, body)
    assert app.exit_code == 2
    assert app.return_code == 2


def test_turn_styles_by_provenance_and_stats() -> None:
    app, fake = demo_app()

    async def body(pilot: Pilot) -> None:
        await send_and_wait(pilot, DEMO_PROMPTS[0])
        assert fake.prompts == [DEMO_PROMPTS[0]]
        r = runs(answer_text(app))
        assert ("Here is a", STYLES["draft"]) in r
        assert (" function that reverses a", STYLES["ngram"]) in r  # the prompt lookup's span
        assert (" string", STYLES["bonus"]) in r
        assert ("def", STYLES["correction"]) in r
        assert ("import", STYLES["rejected"]) in r
        done = demo_turns()[0][-1]
        assert isinstance(done, Done)
        assert app.transcript.turns[0].answer() == done.text
        panel = stats_text(app)
        assert "T-360M" in panel and "D-135M" in panel
        assert "auto → mdbv" in panel
        assert f"{done.stats.tok_per_s:6.1f}" in panel
        assert "predicted 41 tok/s" in panel  # choice_note of auto
        assert "by proposer" in panel and "ngram" in panel  # the lookup's share of the tokens
        assert app.stats is not None and app.stats.n_tokens == done.stats.n_tokens

    run_app(app, body)


def test_parse_turn_marks_cuts_and_highlights_t_star() -> None:
    app, _ = demo_app()

    async def body(pilot: Pilot) -> None:
        for prompt in DEMO_PROMPTS:
            await send_and_wait(pilot, prompt)
        assert len(app.query(".answer")) == 2  # multi-turn: both turns stay on screen
        r = runs(answer_text(app, 1))
        assert ("‹t* 0.81›", STYLES["tstar"]) in r
        assert ("‹0.97›", STYLES["cut_pass"]) in r
        assert ("‹0.32›", STYLES["cut_fail"]) in r
        assert ("    return s", STYLES["rejected"]) in r
        assert ("[::-1]", STYLES["target"]) in r
        assert "auto → parse" in stats_text(app)

    run_app(app, body)


def test_toggle_rejected_text() -> None:
    app, _ = demo_app()

    async def body(pilot: Pilot) -> None:
        await send_and_wait(pilot, DEMO_PROMPTS[0])
        assert "This uses slicing" in answer_text(app).plain
        await pilot.press("f3")
        assert not app.show_rejected
        plain = answer_text(app).plain
        assert "This uses slicing" not in plain and "import" not in plain
        assert plain == app.transcript.turns[0].answer()
        await pilot.press("f3")
        assert "This uses slicing" in answer_text(app).plain

    run_app(app, body)


def test_escape_stops_generation() -> None:
    app, fake = demo_app(hold_after=4)

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.session is not None)
        app.query_one("#prompt", Input).value = "go"
        await pilot.press("enter")
        await wait_until(pilot, lambda: "Here is a" in answer_text(app).plain)
        assert app.generating
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.generating and not app.pending())
        assert fake.stop_calls == 1
        done = app.transcript.turns[-1].done
        assert done is not None and done.reason == "interrupted"
        assert "stopped" in answer_text(app).plain
        fake.hold_after = None
        # the app is usable again: a second turn runs to the end
        await send_and_wait(pilot, "again")
        assert app.transcript.turns[-1].done is not None

    run_app(app, body)


def test_cycle_method_applies_to_next_turn() -> None:
    app, fake = demo_app()

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.session is not None)
        assert app.cfg.method == METHODS[0]
        await pilot.press("f2")
        assert app.cfg.method == METHODS[1]
        assert f"method    {METHODS[1]}" in stats_text(app)
        await send_and_wait(pilot, "hi")
        assert fake.configs[-1].method == METHODS[1]
        assert f"method    {METHODS[1]} → mdbv" in stats_text(app)  # asked → what ran
        await pilot.press("f2")
        assert f"next turn {METHODS[2]}" in stats_text(app)
        for _ in range(len(METHODS) - 2):
            await pilot.press("f2")
        assert app.cfg.method == METHODS[0]  # wraps around

    run_app(app, body)


def test_help_opens_and_escape_closes_it_without_stopping() -> None:
    app, fake = demo_app()

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.session is not None)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        assert fake.stop_calls == 0

    run_app(app, body)


def test_help_lists_every_key_the_app_binds() -> None:
    from localspec.tui.app import LocalspecApp
    from localspec.tui.help import KEYS

    listed = {k.lower().replace("esc", "escape") for k, _ in KEYS}
    bound = {b.key for b in LocalspecApp.BINDINGS}
    assert bound <= listed, bound - listed


def test_new_chat_resets_session_and_screen() -> None:
    app, fake = demo_app()

    async def body(pilot: Pilot) -> None:
        await send_and_wait(pilot, DEMO_PROMPTS[0])
        assert len(app.query(".answer")) == 1
        await pilot.press("ctrl+l")
        await pilot.pause()
        assert fake.resets == 1
        assert len(app.query(".answer")) == 0
        assert app.transcript.turns == []

    run_app(app, body)


class ManyTokens(FakeSession):
    """600 single-token events as fast as the thread can produce them."""

    def __init__(self) -> None:
        stats = Stats(method="ar", n_tokens=600, seconds=1.0, target_calls=600)
        script: list[Event] = [Written((i,), "x", "target") for i in range(600)]
        super().__init__([script + [Done("eog", "x" * 600, stats)]], delay=0.0005)


def test_events_are_coalesced() -> None:
    fake = ManyTokens()
    app = LocalspecApp(fake_factory(fake), GenConfig())

    async def body(pilot: Pilot) -> None:
        await send_and_wait(pilot, "count")
        assert answer_text(app).plain == "x" * 600
        assert app.flushes < 100  # far fewer renders than events

    run_app(app, body)


class Failing(FakeSession):
    """A session whose generation raises mid-turn (e.g. the context fills up)."""

    def chat(self, user_text: str, cfg: GenConfig) -> Iterator[Event]:
        yield Written((1,), "partial", "target")
        raise ContextFullError("the conversation no longer fits in 4096 tokens: press Ctrl+L")


def test_generation_error_is_shown_and_app_recovers() -> None:
    fake = Failing([])
    app = LocalspecApp(fake_factory(fake), GenConfig())

    async def body(pilot: Pilot) -> None:
        await send_and_wait(pilot, "long")
        plain = answer_text(app).plain
        assert plain.startswith("partial")
        assert "error: the conversation no longer fits" in plain
        assert not app.generating
        assert not app.query_one("#prompt", Input).disabled

    run_app(app, body)


def test_send_while_generating_is_refused() -> None:
    app, fake = demo_app(hold_after=2)

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.session is not None)
        prompt = app.query_one("#prompt", Input)
        prompt.value = "one"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.generating)
        prompt.value = "two"
        await pilot.press("enter")
        await pilot.pause()
        assert fake.prompts == ["one"]
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.generating)

    run_app(app, body)


def test_run_tui_returns_exit_code_and_closes_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_tui (the CLI's entry point) quits with 0 and closes the session it loaded."""
    from localspec.tui import run as app_module

    fake = FakeSession(demo_turns())
    original_run = LocalspecApp.run

    def headless_run(self: LocalspecApp, **kw: object) -> object:
        async def auto_pilot(pilot: Pilot) -> None:
            await wait_until(pilot, lambda: self.session is not None)
            await pilot.press("ctrl+q")

        return original_run(self, headless=True, size=SIZE, auto_pilot=auto_pilot)

    monkeypatch.setattr(LocalspecApp, "run", headless_run)
    assert app_module.run_tui(fake_factory(fake), GenConfig(), "t") == 0
    assert fake.closed


def test_run_tui_returns_2_when_loading_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from localspec.tui import run as app_module

    original_run = LocalspecApp.run

    def headless_run(self: LocalspecApp, **kw: object) -> object:
        async def auto_pilot(pilot: Pilot) -> None:
            await wait_until(pilot, lambda: self.error is not None)
            await pilot.press("ctrl+q")

        return original_run(self, headless=True, size=SIZE, auto_pilot=auto_pilot)

    monkeypatch.setattr(LocalspecApp, "run", headless_run)
    err = ModelNotFoundError("no such file: x.gguf")
    assert app_module.run_tui(fake_factory(FakeSession([]), error=err), GenConfig()) == 2
