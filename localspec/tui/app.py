"""The Textual app: conversation pane, stats panel, input box, footer.

Threading model (why it looks like this): model loading and generation run in thread
workers because llama.cpp calls block. Worker threads never touch widgets; they append
events (and progress / load results) to a locked inbox. A 50 ms UI timer drains the inbox,
folds everything into the pure `Transcript`, and re-renders ONCE per flush, so 100+ tok/s
costs ~20 renders a second, not one per token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header, Input, ProgressBar, Static

from localspec.config import METHOD_TABLE, METHODS, GenConfig
from localspec.events import Done, Event, Progress, Stats, StatsUpdate
from localspec.session import ProgressFn, Session
from localspec.tui.help import HelpScreen
from localspec.tui.inbox import (
    BAR_WIDTH,
    CTRL_C_WINDOW,
    DONE_NOTES,
    Inbox,
    _Failed,
    _Finished,
    _Loaded,
    _Progress,
    describe_error,
    short_name,
)
from localspec.tui.stats import PanelInfo, render_stats
from localspec.tui.status import PromptInput, StatusLine
from localspec.tui.thinking import ThinkingBlocks
from localspec.tui.transcript import STYLES, Transcript, Turn

SessionFactory = Callable[[ProgressFn], Session]
"""Called in a worker thread with a progress callback; returns a loaded Session."""
Settle = Callable[[Session], GenConfig]
"""The loaded session -> the final settings (localspec.settings.resolve: the model's card)."""


class LocalspecApp(App[int]):
    """Chat with a target/draft pair and watch what the speculation did to each token."""

    CSS_PATH = "app.tcss"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        # priority: the focused Input binds Ctrl-C to copy, which would swallow it
        Binding("ctrl+c", "interrupt", "Stop / quit", show=False, priority=True),
        Binding("f2", "cycle_method", "Method"),
        Binding("f3", "toggle_rejected", "Rejected"),
        Binding("f4", "toggle_thinking", "Thinking", show=False),  # fold / unfold thinking blocks
        Binding("f5", "cycle_reasoning", "Reasoning", show=False),  # next turn: auto / on / off
        Binding("ctrl+l", "new_chat", "New chat"),
        Binding("f1", "help", "Help"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(self, session_factory: SessionFactory, cfg: GenConfig | None = None, *,
                 title: str = "localspec", flush_interval: float = 0.05,
                 show_rejected: bool = True, settle: Settle | None = None) -> None:
        super().__init__()
        self.session_factory = session_factory
        self.settle = settle
        self.cfg = cfg or GenConfig()
        self.title = title
        self.flush_interval = flush_interval
        self.show_rejected = show_rejected
        self.session: Session | None = None
        self.transcript = Transcript()
        self.stats: Stats | None = None
        self.info = PanelInfo(method=self.cfg.method)
        self.generating = False
        self.error: str | None = None
        self.exit_code = 0
        self.flushes = 0
        self._inbox: list[Inbox] = []
        self._lock = threading.Lock()
        self._turn_views: list[tuple[Static, Static]] = []
        self._ctrl_c_at: float | None = None  # when the last unanswered Ctrl-C came
        self.thinking = ThinkingBlocks()  # thinking models: reasoning blocks (tui/thinking.py)

    # --- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with VerticalScroll(id="conversation"):
                with Vertical(id="loading"):
                    yield Static("starting…", id="loading-message", markup=False)
                    yield ProgressBar(total=1.0, show_eta=False, id="loading-bar")
                yield Static("", id="error", markup=False)
            with VerticalScroll(id="side"):
                yield Static("", id="stats", markup=False)
        yield StatusLine(id="status")
        yield PromptInput(placeholder="loading models…", id="prompt", disabled=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#error").display = False
        self._render_stats()
        self.set_interval(self.flush_interval, self.flush)
        self.run_worker(self._load, name="load", thread=True, exit_on_error=False)

    # --- worker side (threads: only ever touch the inbox) ---------------------------------

    def _post(self, item: Inbox) -> None:
        with self._lock:
            self._inbox.append(item)

    def _load(self) -> None:
        def progress(message: str, fraction: float) -> None:
            self._post(_Progress(message, fraction))

        try:
            # a first run downloads the models: their bars and pip's output become calls
            # of progress() (the loading bar), never text painted over the screen
            from localspec.models.progress import reporting

            with reporting(progress):
                session = self.session_factory(progress)
            settled = self.settle(session) if self.settle else None
        except Exception as exc:  # every failure must reach the screen
            self._post(_Failed(describe_error(exc), loading=True))
            return
        self._post(_Loaded(session, settled))
        # the cost model is timed while the user types: its steps show in the status line
        session.start_timing(settled or self.cfg, lambda message, fraction: self._post(Progress(message, fraction)))

    def _generate(self, session: Session, user_text: str, cfg: GenConfig) -> None:
        try:
            for ev in session.chat(user_text, cfg, **self.thinking.chat_kwargs(session)):
                self._post(ev)
        except Exception as exc:
            self._post(_Failed(describe_error(exc), loading=False))
        finally:
            self._post(_Finished())

    # --- UI side --------------------------------------------------------------------------

    def pending(self) -> int:
        """Items posted by workers and not yet shown (tests wait for 0)."""
        with self._lock:
            return len(self._inbox)

    def flush(self) -> None:
        """Drain the inbox and re-render what changed (called by the UI timer)."""
        with self._lock:
            items, self._inbox = self._inbox, []
        if not items:
            return
        self.flushes += 1
        turn_dirty = stats_dirty = False
        for item in items:
            if isinstance(item, _Progress):
                self._show_progress(item)
            elif isinstance(item, _Loaded):
                if item.cfg is not None:  # the model's sampling; a method picked while loading stays
                    self.cfg = replace(self.cfg, sampling=item.cfg.sampling)
                self._on_loaded(item.session)
                stats_dirty = True
            elif isinstance(item, _Failed):
                self._on_failed(item)
                turn_dirty = stats_dirty = True
            elif isinstance(item, Progress):  # the cost model timing this machine, once
                status = self.query_one("#status", StatusLine)
                if item.fraction >= 1.0:
                    status.clear()
                else:
                    status.say(item.message, seconds=60.0)
            elif isinstance(item, _Finished):
                self.generating = False
                self.info.state = "ready"
                stats_dirty = True
            else:
                self._on_event(item)
                turn_dirty = True
                stats_dirty = stats_dirty or isinstance(item, (StatsUpdate, Done))
        if turn_dirty and self._turn_views:
            self._render_turn(len(self._turn_views) - 1)
        if stats_dirty:
            self._render_stats()

    def _on_event(self, ev: Event) -> None:
        self.transcript.apply(ev)
        self.thinking.feed(len(self.transcript.turns) - 1, ev, self.session)
        if isinstance(ev, StatsUpdate):
            self.stats = ev.stats
        elif isinstance(ev, Done):
            self.stats = ev.stats
            self.info.turns += 1
            self.info.session_tokens += ev.stats.n_tokens
            self.info.session_seconds += ev.stats.seconds
            note = DONE_NOTES.get(ev.reason)
            if note or ev.message:
                self.transcript.add_note(f"  [{' · '.join(filter(None, [note, ev.message]))}]")

    def _show_progress(self, p: _Progress) -> None:
        self.query_one("#loading-message", Static).update(Text(p.message))
        self.query_one("#loading-bar", ProgressBar).update(progress=max(0.0, min(1.0, p.fraction)))

    def _on_loaded(self, session: Session) -> None:
        self.session = session
        self.info.target_name = short_name(session.target_name) or "?"
        self.info.draft_name = short_name(session.draft_name)
        self.info.placement = dict(getattr(session, "placement", None) or {})
        self.info.state = "ready"
        self.sub_title = f"{self.info.target_name} ← {self.info.draft_name or 'no draft'}"
        self.query_one("#loading").display = False
        prompt = self.query_one("#prompt", Input)
        prompt.disabled = False
        prompt.placeholder = "Ask something and press Enter"
        prompt.focus()

    def _on_failed(self, failure: _Failed) -> None:
        if failure.loading:
            self.error = failure.message
            self.exit_code = 2
            self.info.state = "error"
            self.query_one("#loading").display = False
            box = self.query_one("#error", Static)
            box.update(Text.assemble(("Could not open the models\n\n", "bold"), failure.message))
            box.display = True
            self.query_one("#prompt", Input).placeholder = "no session — Ctrl+Q to quit"
        else:
            self.transcript.add_note(f"error: {failure.message}", "error")

    def _render_stats(self) -> None:
        self.info.method = self.cfg.method
        panel = render_stats(self.stats, self.info, width=BAR_WIDTH)
        self.query_one("#stats", Static).update(panel)

    def _render_turn(self, index: int) -> None:
        turn: Turn = self.transcript.turns[index]
        _, answer = self._turn_views[index]
        text = self.transcript.render_turn(turn, show_rejected=self.show_rejected)
        text = self.thinking.render(index, turn, self.session, text, show_rejected=self.show_rejected)
        if not text.plain and self.generating and index == len(self._turn_views) - 1:
            text = Text("…", style=STYLES["note"])
        answer.update(text)
        conv = self.query_one("#conversation", VerticalScroll)
        if conv.scroll_y >= conv.max_scroll_y - 2:
            self.call_after_refresh(conv.scroll_end, animate=False)

    def _render_all(self) -> None:
        for i in range(len(self._turn_views)):
            self._render_turn(i)

    async def _add_turn_view(self, user_text: str) -> None:
        user = Static(Text.assemble(("you ", "bold reverse"), " ", user_text), classes="user")
        answer = Static(Text("…", style=STYLES["note"]), classes="answer")
        self._turn_views.append((user, answer))
        await self.query_one("#conversation").mount_all([user, answer])
        self.query_one("#conversation", VerticalScroll).scroll_end(animate=False)

    # --- input and actions ----------------------------------------------------------------

    async def on_input_submitted(self, message: Input.Submitted) -> None:
        text = message.value.strip()
        if not text:
            return
        if self.session is None:
            self.refuse("No session loaded: " + ("it failed to open (Ctrl+Q quits)" if self.error
                                                 else "the models are still loading."))
            return
        if self.generating:
            self.refuse("Still generating — press Esc or Ctrl+C to stop first.")
            return
        message.input.value = ""
        await self.send(text)

    async def send(self, text: str) -> None:
        """Start one turn: the worker streams events into the inbox."""
        assert self.session is not None
        self.generating = True
        self.info.state = "generating"
        self.stats = None
        self.info.turn_method = self.cfg.method
        self.transcript.begin_turn(text)
        await self._add_turn_view(text)
        self._render_stats()
        cfg = replace(self.cfg)
        self.run_worker(
            lambda: self._generate(self.session, text, cfg),  # type: ignore[arg-type]
            name="generate",
            thread=True,
            exit_on_error=False,
        )

    @property
    def status_message(self) -> str:
        """What the status line says now ("" when it is hidden)."""
        return self.query_one("#status", StatusLine).message

    def say(self, message: str) -> None:
        self.query_one("#status", StatusLine).say(message)

    def refuse(self, why: str) -> None:
        """A key or a message that cannot act now says why, instead of doing nothing."""
        self.query_one("#status", StatusLine).say(why, refused=True)

    def action_stop(self) -> None:
        """Esc: ask the session to stop after the current iteration (thread-safe)."""
        if self.generating and self.session is not None:
            self.session.stop()
            self.info.state = "stopping"
            self._render_stats()

    async def action_interrupt(self) -> None:
        """Ctrl-C: stop the reply (as the README says); a second Ctrl-C soon after quits.

        Idle with text selected in the input box, it copies (the Input's own Ctrl-C).
        """
        now = time.monotonic()
        if self._ctrl_c_at is not None and now - self._ctrl_c_at <= CTRL_C_WINDOW:
            self._ctrl_c_at = None
            await self.action_quit()
            return
        prompt = self.query_one("#prompt", PromptInput)
        if not self.generating and self.focused is prompt and prompt.selected_text:
            prompt.action_copy()
            return
        self._ctrl_c_at = now
        if self.generating and self.session is not None:
            self.action_stop()
            self.say("Stopping the reply — press Ctrl+C again to quit.")
        else:
            self.say("Nothing to stop — press Ctrl+C again to quit (Ctrl+Q quits at once).")

    def action_cycle_method(self) -> None:
        """Next method in config.METHODS; applies from the next turn on."""
        i = METHODS.index(self.cfg.method) if self.cfg.method in METHODS else -1
        self.cfg.method = METHODS[(i + 1) % len(METHODS)]
        self._render_stats()
        when = " (from the next turn)" if self.generating else ""
        need = METHOD_TABLE[self.cfg.method].min_K
        if self.cfg.K < need:
            when += f": needs -K {need} or more (start chat with -K {need}); with one draft use gbv"
        self.notify(f"method: {self.cfg.method}{when}", timeout=2)

    def action_toggle_thinking(self) -> None:
        self.thinking.folded = not self.thinking.folded
        self._render_all()

    def action_cycle_reasoning(self) -> None:
        self.notify(f"thinking for the next turn: {self.thinking.cycle_mode()}")

    def action_toggle_rejected(self) -> None:
        self.show_rejected = not self.show_rejected
        self._render_all()

    async def action_new_chat(self) -> None:
        """Forget the conversation (session and screen); refused while generating."""
        if self.generating:
            self.refuse("New chat refused while a reply is generating — press Esc or Ctrl+C to stop it first.")
            return
        if self.session is None:
            self.refuse("New chat refused: no session is open yet.")
            return
        self.session.reset()
        self.transcript = Transcript()
        self.thinking.reset()
        self.info.turn_method = None
        for user, answer in self._turn_views:
            await user.remove()
            await answer.remove()
        self._turn_views.clear()
        self.stats = None
        self._render_stats()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def on_unmount(self) -> None:
        """However the app ends, a running generation must end too: exit joins the thread."""
        if self.generating and self.session is not None:
            self.session.stop()

    async def action_quit(self) -> None:
        """Stop a running generation first, so the worker thread ends and exit is prompt."""
        if self.generating and self.session is not None:
            self.session.stop()
        # The load error is printed again on exit so it survives the screen being cleared.
        message = Text(f"localspec: {self.error}", style="bold red") if self.error else None
        self.exit(self.exit_code, return_code=self.exit_code, message=message)
