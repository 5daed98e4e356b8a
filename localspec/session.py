"""The Session interface: the one thing frontends (CLI, TUI, bench, server) talk to.

Frontends never touch the backend or the decoding loops: they open a session
(`localspec.loading.open_session` loads the models) and iterate over the events of
`generate()` (any prompt: chat messages, raw text or token ids) or `chat()` (one more user
turn of the session's own conversation). A session keeps both models' KV caches between
calls and reuses the longest common token prefix, so a chat client that resends the whole
history only pays for the new suffix.

This module is the interface alone (a Protocol and the option types); it imports no
implementation, so anything may import it without a circle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from localspec.config import GenConfig
from localspec.events import Event
from localspec.placement.load import LoadOptions
from localspec.stopflag import StopFlag

ProgressFn = Callable[[str, float], None]
"""progress(message, fraction in [0, 1]) for long steps (fetch, load, calibration)."""

Message = Mapping[str, str]
Prompt = Sequence[Message] | Sequence[int] | str
"""What `generate` takes: chat messages (rendered with the target's chat template),
token ids (used as given), or raw text (tokenized, BOS added where the model wants it)."""

__all__ = ["FimInput", "LoadOptions", "Message", "ProgressFn", "Prompt", "Session", "SessionOptions", "StopFlag", "ThinkMarkers"]


@dataclass(frozen=True)
class ThinkMarkers:
    """The delimiters of a thinking model's reasoning block (Qwen3: `<think>`, `</think>`).

    Found in the target itself (localspec.backend.markers), not assumed: `source` says
    where ("vocab": both are single tokens of the vocabulary, ids exact; "template": they
    occur in the chat template but are several tokens each). `open_ids` / `close_ids` are
    their tokenizations, which the reasoning splitter uses to count tokens per segment.
    """

    open: str
    close: str
    open_ids: tuple[int, ...] = ()
    close_ids: tuple[int, ...] = ()
    source: str = "vocab"


@dataclass(frozen=True)
class FimInput:
    """A fill-in-the-middle request (an editor's): the text before and after the cursor,
    neighbouring files as {"filename", "text"} chunks (llama-server's `input_extra`), and
    `prompt`, text already typed at the cursor that the answer continues. Session.fim_prompt
    makes the prompt tokens of it with the target's own FIM tokens (backend/fim.py)."""

    prefix: str
    suffix: str
    extra: tuple[Mapping[str, str], ...] = ()
    prompt: str = ""


@dataclass
class SessionOptions:
    """How the models are loaded and their contexts sized (not per-generation settings)."""

    n_ctx: int = 4096
    n_batch: int = 512
    threads: int | None = None
    verbose: bool = False
    n_seq_max: int = 16
    target_load: LoadOptions = field(default_factory=LoadOptions)
    draft_load: LoadOptions = field(default_factory=LoadOptions)
    recalibrate: bool = False  # re-time the cost model's curves on first use (--recalibrate)
    rpc: list[str] = field(default_factory=list)  # HOST:PORT of llama.cpp RPC servers to register
    rs_snapshots: int = 16  # recurrent-state snapshots per sequence (--rs-snapshots; llama.cpp's n_rs_seq)
    # load the target's MTP head (its nextn layers): True for --spec-type mtp; None: when the
    # target has one and no draft model is given (what `auto` then drafts with)
    mtp: bool | None = False
    # slots sharing these contexts (localspec/pool.py): a recurrent state is one per sequence,
    # so a stateful model's context holds each slot's main state and one branch
    n_slots: int = 1


@runtime_checkable
class Session(Protocol):
    """Implemented by localspec.runtime.RuntimeSession (and by test fakes)."""

    target_name: str
    draft_name: str | None

    @property
    def bos_text(self) -> str:
        """Text of the BOS token the target puts before every prompt ('' when it puts none):
        what a client handing `render()`'s text to another llama.cpp tool strips, so that
        tool does not see BOS twice (bench's llama.cpp peer)."""
        ...

    def generate(
        self,
        prompt: Prompt,
        cfg: GenConfig,
        *,
        prefill: str = "",
        template_kwargs: Mapping[str, object] | None = None,
    ) -> Iterator[Event]:
        """Generate one answer for `prompt`; the last event is Done.

        Messages are rendered with the chat template (`template_kwargs` reach it, e.g.
        `enable_thinking`; `prefill` is appended after the generation prompt, as the start
        of the assistant's answer). The session's chat history is not changed. Bad input
        (empty prompt, prompt beyond the context, flags the models cannot serve) raises a
        LocalspecError when called, before any event.
        """
        ...

    @property
    def placement(self) -> Mapping[str, str]:
        """Where each model computes, for people: {"target": "CUDA0 20 + CPU 9 of 29 layers",
        "draft": "CUDA0 25/25 layers"} (the draft only when there is one)."""
        ...

    @property
    def think_markers(self) -> ThinkMarkers | None:
        """The target's reasoning-block markers, None for a model that does not think."""
        ...

    @property
    def sampling_metadata(self) -> Mapping[str, str]:
        """The recommended sampling the target's GGUF carries (llama.cpp's
        `general.sampling.*` keys, e.g. {"general.sampling.temp": "0.6"}); {} when none."""
        ...

    def chat(
        self,
        user_text: str,
        cfg: GenConfig,
        *,
        template_kwargs: Mapping[str, object] | None = None,
        reasoning_budget: int | None = None,
    ) -> Iterator[Event]:
        """Append a user turn to the session's conversation and generate the reply.

        Past assistant turns go back to the template with their answer only (the reasoning
        block stripped, the model-card rule for thinking models); `reasoning_budget` caps
        the thinking tokens of this reply (localspec.thinking.budget)."""
        ...

    def complete(self, prompt: str, cfg: GenConfig, *, chat: bool = True) -> Iterator[Event]:
        """One-shot generation on a fresh conversation (chat-templated unless chat=False)."""
        ...

    def render(self, messages: Sequence[Message], *, template_kwargs: Mapping[str, object] | None = None) -> str:
        """The prompt text the chat template makes of these messages (generation prompt added)."""
        ...

    def count_prompt(self, prompt: Prompt, *, prefill: str = "",
                     template_kwargs: Mapping[str, object] | None = None) -> int:
        """How many target tokens generate() would evaluate for this prompt on a fresh
        context (the previous answer's exact tokens are not reused): what a client asks
        before sending (the server's `/v1/messages/count_tokens`). Touches no context, so
        the server calls it while a slot generates."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Target token ids of raw text, BOS added where the model wants it."""
        ...

    @property
    def fim_missing(self) -> list[str]:
        """The fill-in-the-middle tokens the target lacks (["pre", "suf", "mid"] for a model
        that cannot fill in; [] for a FIM model): what a frontend checks before it takes
        a FIM request."""
        ...

    @property
    def fim_ids(self) -> tuple[int, int]:
        """The target's FIM suffix and middle token ids ((-1, -1) for a model without them):
        where a FIM prompt's text after the cursor lies (bench priors fits lookups on it)."""
        ...

    def fim_prompt(self, fim: FimInput, n_predict: int) -> list[int]:
        """Prompt token ids for `fim` in the target's FIM format, cut to the context as
        llama-server's /infill cuts it (`n_predict` is reserved for the answer); pass them to
        `generate`. Raises LocalspecError for a model without FIM tokens."""
        ...

    def prefetch(self, tokens: list[int], stop: StopFlag) -> int:
        """Evaluate `tokens` (a prompt a request will likely send) into the cache, ending
        between two small chunks once `stop` is set; returns the tokens evaluated. The next
        `generate` reuses whatever prefix of them its prompt shares (nothing else changes)."""
        ...

    def explain(self, cfg: GenConfig) -> str:
        """The cost model's table and choice for `cfg` (what `--explain` prints)."""
        ...

    def stop(self) -> None:
        """Ask the running generation to end after the current iteration (thread-safe)."""
        ...

    def start_timing(self, cfg: GenConfig, progress: ProgressFn | None = None) -> None:
        """Time the cost model on a background thread from now on (serve and chat, which have
        idle time; a no-op for sessions with nothing to time). Returns at once: a generation
        never waits for it beyond the timing step in flight (Stats.timing_seconds), and
        runs what needs no missing curve meanwhile (auto: prompt lookups or plain decoding,
        said in its choice note). `progress` is called from that thread after each step.
        Without it, the first turn that needs the cost model times it first (`run`)."""
        ...

    @property
    def timing_progress(self) -> tuple[int, int] | None:
        """(batch sizes timed, sizes to time) while the cost model is being timed, else None
        (what /health and the TUI show)."""
        ...

    def reset(self) -> None:
        """Forget the conversation (and the KV caches); the suffix store is kept."""
        ...

    def forget_lookups(self) -> None:
        """Empty the suffix store (every earlier turn's and request's text): the next turn
        drafts only from its own prompt. Benchmarks call it between runs, or one method's
        run would draft from another method's answer to the same prompt."""
        ...

    def forget_learning(self, priors: bool = True) -> None:
        """Forget what auto learned this session (the lookup gate's evidence, the draft's
        acceptance): the next turn starts as a fresh process's first turn, from the shipped
        priors (`priors`) or from the uninformed ones. Benchmarks of a first turn call it."""
        ...

    def close(self) -> None:
        """Free the models."""
        ...
