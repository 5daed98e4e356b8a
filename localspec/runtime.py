"""RuntimeSession: models + contexts + conversation, behind the Session interface.

This is where a user's request becomes a loop: resolve and load both models, keep the
conversation and both KV caches across turns, pick the loop for the method, and wrap its
events with the turn's Done (also on Ctrl-C, so a chat session stays usable).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from localspec.backend import Context, Model, check_vocab_compat
from localspec.backend.chat import ChatTemplate
from localspec.config import GenConfig
from localspec.decode.autoregressive import ar_loop
from localspec.decode.emitter import Emitter
from localspec.decode.state import KVState
from localspec.decode.turn import Turn
from localspec.errors import ConfigError
from localspec.events import Done, Event, Stats
from localspec.session import ProgressFn, Session, SessionOptions, StopFlag


def _resolve(spec: str, progress: ProgressFn | None) -> str:
    from localspec.models import resolve_model

    return str(resolve_model(spec, fetch=True, progress=True))


def load_session(
    target: str, draft: str | None, options: SessionOptions, progress: ProgressFn | None
) -> RuntimeSession:
    """Resolve, load and check a target (and optional draft)."""
    say = progress or (lambda msg, frac: None)
    say(f"resolving {target}", 0.0)
    tpath = _resolve(target, progress)
    dpath = _resolve(draft, progress) if draft else None
    say(f"loading {target}", 0.3)
    tmodel = Model(tpath, verbose=options.verbose)
    dmodel = None
    if dpath:
        say(f"loading {draft}", 0.6)
        dmodel = Model(dpath, verbose=options.verbose)
        check_vocab_compat(tmodel, dmodel)
    say("creating contexts", 0.9)
    sess = RuntimeSession(tmodel, dmodel, options, target_name=target, draft_name=draft)
    say("ready", 1.0)
    return sess


class RuntimeSession(Session):
    """The real Session over llama.cpp."""

    def __init__(
        self,
        target: Model,
        draft: Model | None,
        options: SessionOptions,
        target_name: str | None = None,
        draft_name: str | None = None,
    ) -> None:
        self.options = options
        self.target_model = target
        self.draft_model = draft
        self.target_name = target_name or target.name
        self.draft_name = (draft_name or draft.name) if draft else None
        ctx_kw = dict(n_ctx=options.n_ctx, n_batch=options.n_batch, n_seq_max=options.n_seq_max, threads=options.threads)
        self.target = KVState(Context(target, **ctx_kw))
        self.draft = KVState(Context(draft, **ctx_kw)) if draft else None
        self.template = ChatTemplate(target)
        self.messages: list[dict[str, str]] = []
        self._stop = StopFlag()
        self._last_prompt_text = ""
        self._last_gen_tokens: list[int] = []
        self.costs = None  # filled lazily by the cost model

    # ------------------------------------------------------------------ Session API
    def stop(self) -> None:
        self._stop.set()

    def reset(self) -> None:
        self.messages = []
        self.target.reset()
        if self.draft:
            self.draft.reset()
        self._last_prompt_text = ""
        self._last_gen_tokens = []

    def close(self) -> None:
        self.target.ctx.close()
        if self.draft:
            self.draft.ctx.close()

    def chat(self, user_text: str, cfg: GenConfig) -> Iterator[Event]:
        self.messages.append({"role": "user", "content": user_text})
        prompt_text = self.template.render(self.messages, add_generation_prompt=True)
        tokens = self._prompt_tokens(prompt_text)
        return self._generate(tokens, cfg, prompt_text)

    def complete(self, prompt: str, cfg: GenConfig, *, chat: bool = True) -> Iterator[Event]:
        self.messages = []
        if chat:
            return self.chat(prompt, cfg)
        tokens = self.target_model.tokenize(prompt, add_special=True, parse_special=False)
        return self._generate(tokens, cfg, None)

    # ------------------------------------------------------------------ internals
    def _prompt_tokens(self, prompt_text: str) -> list[int]:
        """Tokens of the new prompt, reusing the previous turn's exact tokens.

        Re-tokenizing the previous answer can give different ids than the ones generated
        (tokenization is not unique), which would force re-evaluating it; so when the new
        prompt text extends the previous prompt + answer, only the new suffix is tokenized.
        """
        tm = self.target_model
        prev = self._last_prompt_text
        if prev and len(self.messages) >= 2 and self.messages[-2]["role"] == "assistant":
            answer = self.messages[-2]["content"]
            gen = self._last_gen_tokens
            known = prev + answer
            if prompt_text.startswith(known) and tm.detokenize(gen) == answer:
                prev_tokens = self._last_prompt_tokens + gen
                return prev_tokens + tm.tokenize(prompt_text[len(known) :], add_special=False)
        add_bos = tm.add_bos and not (tm.bos >= 0 and prompt_text.startswith(self.template.bos_text or "\0"))
        toks = tm.tokenize(prompt_text, add_special=False)
        return ([tm.bos] if add_bos else []) + toks

    def _check(self, cfg: GenConfig) -> None:
        cfg.validate()
        if cfg.method not in ("ar", "auto") and self.draft is None:
            raise ConfigError(f"--method {cfg.method} needs a draft model (--draft / -md)")
        need = cfg.K + 1
        if cfg.method not in ("ar", "parse") and need > self.options.n_seq_max:
            raise ConfigError(f"-K/--drafts {cfg.K} needs n_seq_max >= {need} (got {self.options.n_seq_max}); lower -K")
        if cfg.method not in ("ar", "parse") and cfg.K * cfg.L + 2 > self.options.n_batch:
            raise ConfigError(
                f"-K/--drafts {cfg.K} x -L/--draft-len {cfg.L} = {cfg.K * cfg.L} draft tokens do not fit "
                f"in one batch of {self.options.n_batch} (--batch); lower -K or -L"
            )

    def _pick_loop(self, cfg: GenConfig):
        method = cfg.method
        if method == "auto":
            if self.draft is None:
                return ar_loop, "ar"
            from localspec.costmodel import model_for
            from localspec.decode.auto import auto_loop

            self.costs = model_for(self, cfg.sampling.temp <= 0)
            return auto_loop, "auto"
        if method == "ar":
            return ar_loop, "ar"
        if method == "parse":
            from localspec.decode.parse import parse_loop

            if cfg.parse.resume == "spec" and cfg.auto_L:  # no -L given: finish as auto would
                from localspec.costmodel import model_for

                self.costs = model_for(self, cfg.sampling.temp <= 0)
            return parse_loop, "parse"
        from localspec.decode.speculative import speculative_loop

        return speculative_loop, method

    def _generate(self, tokens: list[int], cfg: GenConfig, prompt_text: str | None) -> Iterator[Event]:
        self._check(cfg)
        self._stop.clear()
        loop, method = self._pick_loop(cfg)
        stats = Stats(method=method, K=cfg.K if method not in ("ar",) else 1, L=cfg.L if method != "ar" else 0)
        t0 = time.perf_counter()
        stats.prompt_tokens = len(tokens)
        stats.prompt_evaluated = self.target.sync(tokens)
        stats.prompt_seconds = time.perf_counter() - t0
        emitter = Emitter(self.target_model, cfg.n_predict, cfg.stop)
        turn = Turn(
            target_model=self.target_model,
            target=self.target,
            cfg=cfg,
            emitter=emitter,
            stats=stats,
            rng=np.random.default_rng(cfg.seed),
            stop_flag=self._stop,
            draft_model=self.draft_model,
            draft=self.draft,
        )
        turn.method = method
        turn.costs = self.costs
        if self.costs is not None:
            stats.ar_estimate = self.costs.ar()
        return self._drive(loop, turn, tokens, prompt_text)

    def _drive(self, loop, turn: Turn, tokens: list[int], prompt_text: str | None) -> Iterator[Event]:
        reason = None
        message = ""
        try:
            yield from loop(turn)
            if turn.emitter.done is None:
                turn.emitter.close("interrupted" if turn.stop_flag.is_set() else "max_tokens")
            reason = turn.emitter.done
            if reason == "context_full":
                message = "context full: start a new conversation or raise --ctx"
        finally:
            if reason is None:  # Ctrl-C or an exception inside the loop
                turn.emitter.close("interrupted")
            for st in (self.target, self.draft):
                if st is not None:
                    st.repair()
            if turn.method in ("auto", "parse") and self.costs is not None:
                self.costs.save_acceptance()
            text = turn.emitter.text
            if prompt_text is not None:
                self.messages.append({"role": "assistant", "content": text})
                self._last_prompt_text = prompt_text
                self._last_prompt_tokens = list(tokens)
                self._last_gen_tokens = list(turn.emitter.tokens)
        update = turn.tick()
        yield Done(turn.emitter.done or "max_tokens", text, update.stats, message)
