"""The turn plan: (settings, the loaded models' capabilities, memory fit) -> what one
generation runs, decided once per generation, before any decode.

Why one function: the config used to be validated three times and rewritten in five places
before (and during) the first iteration: the MTP head's settings, the memory fit, the head
standing in for a draft model under auto. `plan_turn` makes every such decision and returns
a frozen plan; nothing after it rewrites the config (only a cost model that is not timed
yet narrows auto to the lookups, costmodel/session.TurnCosts.usable, by the same rule).

Why apart from the runtime: these are pure decisions over the config, the context sizes and
the models' memory kinds (backend/memory.py); the runtime only wires their answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from localspec.config import METHOD_TABLE, GenConfig
from localspec.decode.autoregressive import ar_loop
from localspec.decode.drafters import registry
from localspec.decode.state import KVState
from localspec.decode.turn import Turn
from localspec.errors import ConfigError
from localspec.events import Event
from localspec.session import SessionOptions

Loop = Callable[[Turn], Iterator[Event]]


@dataclass(frozen=True)
class TurnPlan:
    """What a turn runs: its config (final), the loop, the method it runs (auto without
    anything to draft with runs "ar"), and whether it decides with the cost model."""

    cfg: GenConfig
    loop: Loop
    method: str
    needs_costs: bool


def plan_turn(cfg: GenConfig, options: SessionOptions, target: KVState, draft: KVState | None,
              head: object | None) -> TurnPlan:
    """The one decision of a turn (see the module docstring). `head`: the target's MTP head
    when the session loaded one (backend/mtp.MtpHead)."""
    from localspec.decode.drafters.mtp import mtp_config

    cfg = mtp_config(cfg, head)  # type: ignore[arg-type]
    check_config(cfg, options, draft is not None)
    cfg = fit_memory(cfg, target, draft)
    if cfg.method == "auto" and draft is None and head is not None and "draft" in cfg.parts:
        cfg = replace(cfg, K=1, auto_K=False)  # the head stands in for the draft model: one chain
    loop, method, needs_costs = pick_loop(cfg, draft is not None)
    return TurnPlan(cfg, loop, method, needs_costs)


def check_config(cfg: GenConfig, options: SessionOptions, has_draft: bool) -> None:
    """The engine's own guard (Session users reach it without the CLI's checks)."""
    cfg.validate()
    if cfg.needs_draft_model and not has_draft:
        raise ConfigError(f"--method {cfg.method} needs a draft model (--draft / -md), "
                          "or --spec-type ngram or suffix (lookups, no model)")
    need = cfg.K + cfg.stacked + 1
    if cfg.method not in ("ar", "parse") and need > options.n_seq_max:
        raise ConfigError(f"-K/--drafts {cfg.K} needs n_seq_max >= {need} (got {options.n_seq_max}); lower -K")
    if cfg.method not in ("ar", "parse") and (cfg.K + cfg.stacked) * cfg.L + 2 > options.n_batch:
        raise ConfigError(
            f"-K/--drafts {cfg.K} x -L/--draft-len {cfg.L} = {cfg.K * cfg.L} draft tokens do not fit "
            f"in one batch of {options.n_batch} (--batch); lower -K or -L"
        )


def fit_memory(cfg: GenConfig, target: KVState, draft: KVState | None) -> GenConfig:
    """Refuse what a recurrent state cannot run (a tree of drafts, PARSE's copies, a stack)
    with the methods that work; let auto choose among one-draft settings only."""
    stateful = [(st.ctx.model.name, st.memory) for st in (target, draft)
                if st is not None and st.drafts_per_pass == 1]
    if not stateful or cfg.method == "ar":
        return cfg
    name, memory = stateful[0]
    ok = [m.name for m in METHOD_TABLE.values() if m.one_state and m.name != "ar"]
    works = f"use one draft (-K 1) with --method {', '.join(ok[:-1])} or {ok[-1]}, or --method ar"
    spec = METHOD_TABLE[cfg.method]
    if not spec.one_state or cfg.stacked or (cfg.K > 1 and not cfg.auto_K):
        what = f"--method {cfg.method}" + (f" -K {cfg.K}" if spec.verifier else "")
        raise ConfigError(f"{what} is not possible on {name}: it keeps a recurrent state "
                          f"({memory.value} memory), which several drafts cannot share; {works}")
    return replace(cfg, K=1, auto_K=False) if cfg.auto_K else cfg


def pick_loop(cfg: GenConfig, has_draft: bool) -> tuple[Loop, str, bool]:
    """The loop for cfg.method, the method it runs, and whether it decides with the cost model."""
    method = cfg.method
    if method == "ar" or (method == "auto" and not has_draft and not set(registry.lookups()) & cfg.kinds):
        return ar_loop, "ar", False
    if method == "auto":
        from localspec.decode.policy.auto import auto_loop

        return auto_loop, "auto", True
    if method == "parse":
        from localspec.decode.parse.loop import parse_loop

        # no -L given: the speculative finish runs what auto would
        return parse_loop, "parse", cfg.parse.resume == "spec" and cfg.auto_L
    from localspec.decode.speculative import speculative_loop

    return speculative_loop, method, False
