"""The drafters by name: what --spec-type, the CLI's help, config validation, the loop,
`auto`, `--explain` and the server's provenance read. Adding a drafter = one `register`.

Builders are named lazily ("module:function") so that reading the registry (config.py
validates --spec-type with it) loads no drafter; a test or plugin may pass a callable.
A builder gets the turn and, under `auto`, its cost model (the drafter then learns into
the cost model's acceptance estimate and, for a head, prices its steps on its curve); it
returns None where it cannot draft here (no draft model, no head).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from localspec.errors import ConfigError

# (turn, auto's cost model or None) -> a drafter (base.Drafter) or None. Typed loosely on
# purpose: this module sits below config.py, so it may import nothing that imports config
Builder = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class DrafterSpec:
    """One drafter as the registry knows it.

    kind: "model" or "lookup" (base.py); aliases: llama.cpp's names for it
    (--spec-type draft-simple ...); one_chain: it drafts one continuation (-K 1; it may
    still stack beside K model drafts when it is a lookup); stands_in: `auto` drafts with it,
    unnamed, where the draft model would when the session has no draft model and the
    builder finds what it needs (the target's MTP head)."""

    name: str
    kind: str
    build: Union[Builder, str]  # noqa: UP007 - a string forward reference inside
    aliases: tuple[str, ...] = ()
    one_chain: bool = False
    stands_in: bool = False
    summary: str = ""

    def builder(self) -> Builder:
        if callable(self.build):
            return self.build
        module, _, fn = self.build.partition(":")
        return getattr(importlib.import_module(module), fn)


REGISTRY: dict[str, DrafterSpec] = {}


def register(spec: DrafterSpec) -> DrafterSpec:
    """Add (or replace) a drafter; its aliases must not name another one."""
    for alias in (spec.name, *spec.aliases):
        other = canonical(alias)
        if other is not None and other != spec.name:
            raise ValueError(f"drafter name {alias!r} is taken by {other!r}")
    REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def canonical(name: str) -> str | None:
    """The registry name for a name or alias, None when unknown."""
    if name in REGISTRY:
        return name
    return next((s.name for s in REGISTRY.values() if name in s.aliases), None)


def spec(name: str) -> DrafterSpec:
    return REGISTRY[name]


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def models() -> tuple[str, ...]:
    """The drafters that run a model (the draft model, a head)."""
    return tuple(s.name for s in REGISTRY.values() if s.kind == "model")


def lookups() -> tuple[str, ...]:
    """The drafters that call no model: point-mass drafts, one continuation."""
    return tuple(s.name for s in REGISTRY.values() if s.kind == "lookup")


def is_lookup(name: str) -> bool:
    s = REGISTRY.get(name)
    return s is not None and s.kind == "lookup"


def one_chain(name: str) -> bool:
    s = REGISTRY.get(name)
    return s is not None and s.one_chain


def stand_ins() -> tuple[str, ...]:
    return tuple(s.name for s in REGISTRY.values() if s.stands_in)


def build(name: str, turn: Any, auto: Any = None) -> Any:
    """The drafter `name` for this turn (None: it cannot draft here)."""
    return REGISTRY[name].builder()(turn, auto)


def parse_spec_types(given: tuple[str, ...]) -> tuple[str, ...]:
    """--spec-type's items in registry names: a chain `a,b` (the first that drafts), a stack
    `lookup+model` (both in one trie, the lookup first). Raises ConfigError naming what is
    wrong."""
    usage = f"use {', '.join(names())}; several in order: ngram,draft; stacked in one trie: ngram+draft"
    out = []
    for item in given:
        parts = [t.strip() for t in item.split("+")]
        bad = [t for t in parts if canonical(t) is None]
        if bad or not parts or not item:
            raise ConfigError(f"--spec-type: {', '.join(bad) or 'empty'} is not a drafter ({usage})")
        found = [canonical(t) or t for t in parts]
        kinds = [REGISTRY[n].kind for n in found]
        if len(found) > 1 and (len(found) != 2 or sorted(kinds) != ["lookup", "model"]
                               or any(REGISTRY[n].one_chain for n in found if not is_lookup(n))):
            raise ConfigError(f"--spec-type {item}: a stack is one lookup and the draft model "
                              "(ngram+draft or suffix+draft)")
        out.append("+".join(sorted(found, key=lambda n: not is_lookup(n))))  # the lookup first
    if not out:
        raise ConfigError(f"--spec-type is empty: {usage}")
    return tuple(dict.fromkeys(out))


for _spec in (
    DrafterSpec("draft", "model", "localspec.decode.drafters.model:build", ("draft-simple",),
                summary="the draft model (-md)"),
    DrafterSpec("ngram", "lookup", "localspec.decode.drafters.lookup:build", ("ngram-simple",), one_chain=True,
                summary="prompt lookup: what followed the history's last n tokens before"),
    DrafterSpec("prediction", "lookup", "localspec.decode.drafters.prediction:build", one_chain=True,
                summary="the client's predicted output (OpenAI's `prediction`; first in every chain when given)"),
    DrafterSpec("suffix", "lookup", "localspec.decode.drafters.suffix:build", one_chain=True,
                summary="the most frequent continuation in everything the session saw"),
    DrafterSpec("mtp", "model", "localspec.decode.drafters.mtp:build", ("draft-mtp",), one_chain=True,
                stands_in=True, summary="the MTP head"),  # the target's own (nextn layers)
    DrafterSpec("grammar", "grammar", "localspec.decode.drafters.grammar:build", one_chain=True,
                summary="the tokens a grammar forces (constrained turns; first in every chain)"),
):
    register(_spec)
