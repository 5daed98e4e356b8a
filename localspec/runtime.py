"""RuntimeSession: models + contexts + conversation, behind the Session interface.

This is where a user's request becomes a loop: resolve and load both models, keep the
conversation and both KV caches across turns, pick the loop for the method, and wrap its
events with the turn's Done (also on Ctrl-C, so a chat session stays usable).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property

import numpy as np

from localspec import costmodel
from localspec.backend import Context, Model
from localspec.backend.chat import ChatTemplate
from localspec.backend.fim import model_infill
from localspec.backend.mtp import MtpHead
from localspec.backend.prompt_tokens import LastTurn, fresh_tokens, plain_tokens, prompt_tokens
from localspec.config import GenConfig
from localspec.costmodel import CostModel
from localspec.costmodel.session import SessionCosts, Ticket
from localspec.decode.autoregressive import ar_loop
from localspec.decode.constrained import TurnConstraint
from localspec.decode.drafters.suffix import SuffixStore
from localspec.decode.drafters.suffix_shared import SharedSuffix, SlotSuffix
from localspec.decode.emitter import Emitter
from localspec.decode.grammars import Grammars
from localspec.decode.lines import LineRules
from localspec.decode.plan import Loop, fit_memory, pick_loop, plan_turn
from localspec.decode.prompt_scores import PromptScorer
from localspec.decode.state import KVState
from localspec.decode.turn import Turn
from localspec.errors import ConfigError
from localspec.events import Done, Event, PromptLogprobs, Stats
from localspec.session import FimInput, Message, ProgressFn, Prompt, SessionOptions, ThinkMarkers
from localspec.stopflag import StopFlag


class RuntimeSession:
    """The real Session (localspec.session.Session) over llama.cpp."""

    # False: message text never becomes a control token (`serve --no-special-in-content`)
    special_in_content: bool = True

    def __init__(
        self,
        target: Model,
        draft: Model | None,
        options: SessionOptions,
        target_name: str | None = None,
        draft_name: str | None = None,
        states: tuple[KVState, KVState | None] | None = None,  # a slot's (localspec/pool.py)
    ) -> None:
        self.options = options
        self.target_model = target
        self.draft_model = draft
        self.target_name = target_name or target.name
        self.draft_name = (draft_name or draft.name) if draft else None
        ctx_kw = dict(n_ctx=options.n_ctx, n_batch=options.n_batch, n_seq_max=options.n_seq_max,
                      threads=options.threads, rs_snapshots=options.rs_snapshots,
                      n_slots=options.n_slots)
        self.target, self.draft = states or (KVState(Context(target, **ctx_kw)),
                                             KVState(Context(draft, **ctx_kw)) if draft else None)
        self.mtp = MtpHead(self.target.ctx) if target.load_mtp and states is None else None  # the target's own draft
        self.template = ChatTemplate(target)
        self.messages: list[dict[str, str]] = []
        self._stop = StopFlag()
        # (prompt text or None for token/raw prompts, prompt tokens, generated tokens, answer)
        # of the last generation
        self._last: LastTurn | None = None
        # the cost model, its timing and the gate that keeps timing apart from generations
        self._costing = SessionCosts(self.target.ctx, self.draft.ctx if self.draft else None, options.recalibrate)
        self.progress: ProgressFn | None = None  # reports timing outside a generation (--explain)
        # the suffix proposer's store: every turn's prompt and answer (in `serve`, every
        # request's), kept across turns and resets; made on the first turn that drafts by it
        self.suffix: SuffixStore | None = None
        self.shared_suffix: SharedSuffix | None = None  # a pool's slots: every slot's finished ones
        self.grammars = Grammars(target)  # compiled grammars, each turn's matcher (decode/grammars.py)
        self._scorer = PromptScorer()  # prompt log-probabilities, with the last prompt's kept

    @property
    def costs(self) -> CostModel | None:
        """The cost model once built (tests set it, or None to reload the cached curves)."""
        return self._costing.costs

    @costs.setter
    def costs(self, cm: CostModel | None) -> None:
        self._costing.costs = cm

    def never_time(self, why: str | None) -> None:
        """This session must not time its contexts (a pool's slot: a round holds the other
        slots' tokens); a turn that would need timing decodes plainly, saying `why`. None
        lifts it: the pool handed over a model timed at start-up (a refusal left standing
        would make every turn plain decoding, with the model right there)."""
        self._costing.error = why

    # ------------------------------------------------------------------ Session API
    def stop(self) -> None:
        self._stop.set()

    def start_timing(self, cfg: GenConfig, progress: ProgressFn | None = None) -> None:
        _, _, needs_costs = pick_loop(cfg, self.draft is not None)
        self._costing.start(needs_costs, progress)

    @property
    def timing_progress(self) -> tuple[int, int] | None:
        return self._costing.progress

    def reset(self) -> None:
        with self._costing.hold():  # a timing step may be running on these contexts
            self.messages = []
            self.target.reset()
            if self.draft:
                self.draft.reset()
            self._last = None

    def prefetch(self, tokens: list[int], stop: StopFlag) -> int:
        """A likely next prompt evaluated ahead (server/fim_prefetch.py; KVState.prefetch)."""
        with self._costing.hold():
            return self.target.prefetch(tokens, stop)

    def forget_lookups(self) -> None:
        self.suffix = None  # a turn in flight keeps its own reference; the next one starts empty

    def forget_learning(self, priors: bool = True) -> None:
        self._costing.forget_learning(priors)

    def close(self) -> None:
        if not self._costing.close():  # a timing decode still runs: keep the models
            return
        if self.mtp is not None:  # it reads the target context: freed first
            self.mtp.close()
        self.target.ctx.close()
        if self.draft:
            self.draft.ctx.close()

    def generate(
        self,
        prompt: Prompt,
        cfg: GenConfig,
        *,
        prefill: str = "",
        template_kwargs: Mapping[str, object] | None = None,
    ) -> Iterator[Event]:
        if isinstance(prompt, str):
            if not prompt:
                raise ConfigError("empty prompt: nothing to complete")
            return self._generate(self.tokenize(prompt), cfg, None)
        items = list(prompt)
        if not items:
            raise ConfigError("empty prompt: no messages and no tokens")
        if all(isinstance(t, int) for t in items):
            bad = next((t for t in items if not 0 <= t < self.n_vocab), None)
            if bad is not None:  # llama_decode would fail on it (or the int32 cast overflow)
                raise ConfigError(f"token id {bad} is not in the vocabulary (ids 0..{self.n_vocab - 1})")
            return self._generate([int(t) for t in items], cfg, None)
        if not all(isinstance(m, Mapping) for m in items):
            raise ConfigError("a prompt is chat messages, token ids or text, not a mix")
        if not self.special_in_content:
            return self._generate(plain_tokens(self.target_model, self.template, items, template_kwargs, prefill), cfg, None)
        text = self.render(items, template_kwargs=template_kwargs) + prefill
        return self._generate(self._prompt_tokens(text), cfg, text)

    def chat(self, user_text: str, cfg: GenConfig, *, template_kwargs: Mapping[str, object] | None = None,
             reasoning_budget: int | None = None) -> Iterator[Event]:
        from localspec.thinking.budget import think
        from localspec.thinking.split import answer_only

        messages = [*self.messages, {"role": "user", "content": user_text}]
        prompt = answer_only(messages, self.think_markers)  # past turns: answers only (reasoning stripped)
        if reasoning_budget is None:  # both raise before the history changes
            events = self.generate(prompt, cfg, template_kwargs=template_kwargs)
        else:
            events = think(self, prompt, cfg, template_kwargs=template_kwargs, budget=reasoning_budget)
        self.messages = messages
        return self._record_answer(events)

    def complete(self, prompt: str, cfg: GenConfig, *, chat: bool = True) -> Iterator[Event]:
        self.messages = []
        return self.chat(prompt, cfg) if chat else self.generate(prompt, cfg)

    def count_prompt(self, prompt: Prompt, *, prefill: str = "",
                     template_kwargs: Mapping[str, object] | None = None) -> int:
        if isinstance(prompt, str):
            return len(self.tokenize(prompt))
        items = list(prompt)
        if all(isinstance(t, int) for t in items):
            return len(items)
        if not self.special_in_content:
            return len(plain_tokens(self.target_model, self.template, items, template_kwargs, prefill))
        return len(fresh_tokens(self.target_model, self.template,
                               self.render(items, template_kwargs=template_kwargs) + prefill))

    def render(self, messages: Sequence[Message], *, template_kwargs: Mapping[str, object] | None = None) -> str:
        return self.template.render([dict(m) for m in messages], add_generation_prompt=True, template_kwargs=template_kwargs)

    def tokenize(self, text: str) -> list[int]:
        return self.target_model.tokenize(text, add_special=True, parse_special=False)

    @property
    def fim_missing(self) -> list[str]:
        return self.target_model.fim.missing

    @property
    def fim_ids(self) -> tuple[int, int]:
        return self.target_model.fim.suf, self.target_model.fim.mid

    def fim_prompt(self, fim: FimInput, n_predict: int) -> list[int]:
        o = self.options
        return model_infill(self.target_model, self.target_name, fim, n_batch=o.n_batch, n_ctx=o.n_ctx, n_predict=n_predict)

    @property
    def n_vocab(self) -> int:
        """Token ids a prompt may hold: both models must know them (vocabularies of a pair
        may differ in size by up to 128)."""
        sizes = [m.n_vocab for m in (self.target_model, self.draft_model) if m is not None]
        return min(sizes)

    @property
    def bos_text(self) -> str:
        return self.template.bos_text if self.target_model.add_bos else ""

    @property
    def placement(self) -> dict[str, str]:
        models = (("target", self.target_model), ("draft", self.draft_model))
        return {role: m.placement.summary() for role, m in models if m is not None}

    @cached_property
    def think_markers(self) -> ThinkMarkers | None:
        from localspec.backend.hints import find_think_markers

        return find_think_markers(self.target_model, self.template.source)

    @cached_property
    def sampling_metadata(self) -> dict[str, str]:
        from localspec.backend.hints import sampling_metadata

        return sampling_metadata(self.target_model)

    def explain(self, cfg: GenConfig) -> str:
        where = "; ".join(f"{role}: {w}" for role, w in self.placement.items())
        cfg = fit_memory(cfg, self.target, self.draft)
        cm = self._costing.model_now(cfg.sampling.greedy, self.progress) if self.draft is not None else None
        table = costmodel.explain(cm, cfg, self.costs)
        return f"placement: {where}\nmemory: {self.memory_summary()}\n{table}"

    def memory_summary(self) -> str:
        """Each model's memory kind and what it allows (--explain, the TUI)."""
        return "; ".join(f"{role} {st.describe()}" for role, st in (("target", self.target), ("draft", self.draft))
                         if st is not None)

    @property
    def last_prompt_tokens(self) -> list[int]:
        """Prompt tokens of the last generation (for analysis and tests)."""
        return list(self._last[1]) if self._last else []

    @property
    def last_tokens(self) -> list[int]:
        """Tokens the last generation emitted (for analysis and tests)."""
        return list(self._last[2]) if self._last else []

    # ------------------------------------------------------------------ internals
    def _record_answer(self, events: Iterator[Event]) -> Iterator[Event]:
        """Pass events through; the turn's answer joins the conversation once it ends."""
        text = None
        try:
            for ev in events:
                if isinstance(ev, Done):
                    text = ev.text
                yield ev
        finally:
            events.close()  # an abandoned turn: let the loop wind down and record its text
            if text is None and self._last is not None:
                text = self._last[3]  # interrupted: keep what the user saw
            if text is not None:
                self.messages.append({"role": "assistant", "content": text})

    def _prompt_tokens(self, prompt_text: str) -> list[int]:
        """Tokens of a rendered prompt, reusing the previous turn's exact ones (prompt_tokens.py)."""
        return prompt_tokens(self.target_model, self.template, prompt_text, self._last)

    def _suffix_store(self, cfg: GenConfig, tokens: list[int]) -> SuffixStore | SlotSuffix | None:
        """The session's suffix store when this turn may draft by it (made once; its bound
        follows the latest turn's --spec-suffix-max-tokens); a pool's slot also reads the
        pool's shared store (decode/drafters/suffix_shared.py)."""
        if "suffix" not in cfg.kinds:
            return None
        # a slot keeps only the conversation it serves: the shared store holds its earlier ones
        if self.suffix is None or (self.shared_suffix is not None and not self.suffix.continues(tokens)):
            self.suffix = SuffixStore(cfg.suffix_max_tokens)
        self.suffix.max_tokens = cfg.suffix_max_tokens
        return self.suffix if self.shared_suffix is None else SlotSuffix(self.suffix, self.shared_suffix)

    def _generate(self, tokens: list[int], cfg: GenConfig, prompt_text: str | None) -> Iterator[Event]:
        plan = plan_turn(cfg, self.options, self.target, self.draft, self.mtp)
        cfg, loop, method, needs_costs = plan.cfg, plan.loop, plan.method, plan.needs_costs
        constraint = self.grammars.turn(cfg, self.think_markers, prompt_text)  # a bad grammar raises here
        self._last = None
        self._stop.clear()  # before the wait: a stop while it waits ends the turn at once
        # the contexts are this generation's until it ends: wait for a timing step in flight
        ticket = self._costing.enter()
        try:
            stats = Stats(method=method, K=cfg.K if method not in ("ar",) else 1, L=cfg.L if method != "ar" else 0)
            stats.timing_seconds = ticket.waited
            t0 = time.perf_counter()
            stats.prompt_tokens = len(tokens)
            scores = None
            if cfg.prompt_logprobs is None:
                stats.prompt_evaluated = self.target.sync(tokens, self._stop)
            else:  # every position's logits (decode/prompt_scores.py)
                stats.prompt_evaluated, entries = self._scorer.sync(self.target, self.target_model, tokens,
                                                                    cfg.prompt_logprobs)
                scores = PromptLogprobs(entries)
            stats.prompt_seconds = time.perf_counter() - t0
        except BaseException:
            ticket.release()
            raise
        events = self._drive(loop, method, needs_costs, cfg, stats, tokens, prompt_text, ticket, constraint, scores)
        weakref.finalize(events, ticket.release)  # an iterator dropped unstarted frees the gate too
        return events

    def _drive(
        self, loop: Loop, method: str, needs_costs: bool, cfg: GenConfig, stats: Stats,
        tokens: list[int], prompt_text: str | None, ticket: Ticket, constraint: TurnConstraint | None = None,
        scores: PromptLogprobs | None = None,
    ) -> Iterator[Event]:
        if scores is not None:
            yield scores
        costs = None
        if needs_costs:  # never a re-timing; a first timing only where no timer runs in the background
            try:
                got = yield from self._costing.for_turn(cfg.sampling.greedy, self._stop)
            except BaseException:  # abandoned while timing
                ticket.release()
                raise
            stats.timing_seconds += got.seconds
            stats.choice_note = got.note
            costs, cfg = got.usable(method, cfg)
            if costs is None and method == "auto":
                loop = ar_loop
        if costs is not None:
            stats.ar_estimate = costs.ar()
        if constraint is not None:
            stats.constraint = constraint.label
        turn = Turn(
            target_model=self.target_model,
            target=self.target,
            cfg=cfg,
            emitter=Emitter(self.target_model, cfg.n_predict, cfg.stop,
                            LineRules(cfg.n_indent, cfg.max_lines, cfg.t_max_predict_ms)),
            stats=stats,
            rng=np.random.default_rng(cfg.seed),
            stop_flag=self._stop,
            draft_model=self.draft_model,
            draft=self.draft,
            method=method,
            costs=costs,
            suffix=self._suffix_store(cfg, tokens) if method != "ar" else None,
            mtp=self.mtp,
            constraint=constraint,
        )
        reason = None
        message = ""
        try:
            # n_predict 0: the prompt's log-probabilities alone (GenConfig.prompt_logprobs);
            # nothing pending: stopped while its prompt was evaluated (KVState.sync)
            if cfg.n_predict > 0 and self.target.pending:
                yield from loop(turn)
            if turn.emitter.done is None:
                turn.emitter.close("interrupted" if turn.stop_flag.is_set() else "max_tokens")
            reason = turn.emitter.done
            if reason == "context_full":
                message = "context full: start a new conversation or raise --ctx"
            elif reason == "limit" and turn.emitter.lines is not None:
                message = f"stopped by {turn.emitter.lines.note}"
        finally:
            if reason is None:  # Ctrl-C or an exception inside the loop
                turn.emitter.close("interrupted")
            for st in (self.target, self.draft):
                if st is not None:
                    st.repair()
            if turn.costs is not None:
                self._costing.save(turn.costs)
            if turn.suffix is not None:  # the answer's last tokens (after the last draft) too
                turn.suffix.sync(self.target.committed)
                if self.shared_suffix is not None:  # a pool's slot: for every slot's next proposals
                    self.shared_suffix.publish(self.target.committed, turn.cfg.suffix_max_tokens)
            text = turn.emitter.text
            self._last = (prompt_text, list(tokens), list(turn.emitter.tokens), text)
            ticket.release()  # decoding is over: a timing step may run while Done is handled
        update = turn.tick()
        yield Done(turn.emitter.done or "max_tokens", text, update.stats, message, turn.emitter.stop_word)
