"""The TUI on a real Session: SmolLM2 as both target and draft, producing a real reply.

Needs the runtime (`localspec.runtime`, reached through `open_session`) and the
`smollm2_path` fixture from tests/conftest.py. Nothing here is skipped: if the runtime or
the model is missing, the load error shown in the UI is what makes this test fail.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.widgets import Input

from localspec.config import GenConfig
from localspec.loading import open_session
from localspec.session import ProgressFn, Session, SessionOptions
from localspec.tui import LocalspecApp
from tests.support.replay import wait_until


def _finished(app: LocalspecApp) -> bool:
    turns = app.transcript.turns
    return bool(turns) and turns[-1].done is not None


def test_tui_real_smollm2_reply(smollm2_path: Path) -> None:
    model = str(smollm2_path)
    progress_seen: list[tuple[str, float]] = []

    def factory(progress: ProgressFn) -> Session:
        def spy(message: str, fraction: float) -> None:
            progress_seen.append((message, fraction))
            progress(message, fraction)

        return open_session(model, model, SessionOptions(n_ctx=1024), spy)

    cfg = GenConfig(method="sd", K=1, L=4, n_predict=24, seed=0)
    app = LocalspecApp(factory, cfg)

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.session is not None or app.error, 300)
            assert app.error is None, app.error
            app.query_one("#prompt", Input).value = "What is the capital of France?"
            await pilot.press("enter")
            # a 24-token reply can start and finish between two polls: either counts
            await wait_until(pilot, lambda: app.generating or _finished(app), 30)
            await wait_until(pilot, lambda: not app.generating and not app.pending(), 300)
            turn = app.transcript.turns[-1]
            assert turn.done is not None, "generation ended without a Done event"
            assert turn.done.reason in ("eog", "max_tokens", "stop"), turn.done
            assert turn.answer().strip(), "empty reply"
            assert turn.answer() == turn.done.text
            assert app.stats is not None and app.stats.n_tokens > 0
            # same model as draft and target: greedy drafts should mostly be accepted
            assert any(s.kind == "draft" for s in turn.spans)
            assert "tok/s" in str(app.query_one("#stats").content)
        if app.session is not None:
            app.session.close()

    asyncio.run(main())
    assert progress_seen, "open_session reported no progress"
