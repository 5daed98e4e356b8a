"""Which sampling settings are in force, and where each one came from.

Precedence, field by field (temp, top_k, top_p, min_p), as llama.cpp applies a model's own
metadata (common/common.cpp common_init_sampler_from_model: a value the user typed is never
overridden):

1. a flag the user typed (`--temp 0` stays greedy);
2. the registry entry of the target (models.toml `[models.X.sampling]`, with `.thinking`
   and `.non_thinking` sets for models that have both modes: the Qwen3 model card's T 0.6 /
   top-p 0.95 / top-k 20 / min-p 0 while thinking, T 0.7 / top-p 0.8 while not);
3. the GGUF's `general.sampling.*` metadata (defined by this llama.cpp version,
   src/llama-arch.cpp; `Session.sampling_metadata` reads it);
4. llama.cpp's defaults (common/common.h: T 0.8, top-k 40, top-p 0.95, min-p 0.05).

Speculative decoding is lossless at any temperature, so nothing here has to fall back to
greedy. `ResolvedSampling.describe()` is the line `--explain` and the TUI show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from localspec.config import SamplingConfig

FIELDS = ("temp", "top_k", "top_p", "min_p")
LLAMA_CPP_DEFAULTS: dict[str, float] = {"temp": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
FLAG_NAMES = {"temp": "--temp", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p"}
_LABEL = {"temp": "T", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p"}


@dataclass(frozen=True)
class ResolvedSampling:
    """The settings in force and, per field, where the value came from."""

    sampling: SamplingConfig
    sources: dict[str, str] = field(default_factory=dict)
    mode: str = ""  # the registry set used: "thinking", "non_thinking", "default" or ""

    def describe(self) -> str:
        """e.g. `sampling T 0.6, top-k 20, top-p 0.95, min-p 0 (registry qwen3-8b, thinking set)`."""
        s = self.sampling
        values = {"temp": s.temp, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p}
        shown = ", ".join(f"{_LABEL[f]} {values[f]:g}" for f in FIELDS)
        if s.greedy:
            shown = "greedy (T 0)"
        groups: dict[str, list[str]] = {}
        for f in FIELDS:
            groups.setdefault(self.sources.get(f, "?"), []).append(_LABEL[f])
        if len(groups) == 1:
            where = next(iter(groups))
        else:
            where = "; ".join(f"{'/'.join(names)}: {src}" for src, names in groups.items())
        return f"sampling {shown} ({where})"


def registry_sets(target: str | None) -> tuple[str, dict[str, dict[str, float]]] | None:
    """(entry name, sampling sets) of the registry entry for a target name or .gguf path.

    A path matches the entry whose `file` is its file name, so the user's own copy of
    Qwen3-8B-Q4_K_M.gguf gets the model card's sampling too. None when nothing matches.
    """
    from localspec.models.registry import entry_for

    found = entry_for(target)
    if found is None or not found[1].sampling:
        return None
    return found[1].name, found[1].sampling


def _gguf_value(meta: Mapping[str, str], f: str) -> float | None:
    raw = meta.get(f"general.sampling.{f}")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:  # llama.cpp ignores a value strtof cannot read; so do we
        return None


def resolve_sampling(
    flags: Mapping[str, float | int | None],
    *,
    registry_entry: tuple[str, Mapping[str, Mapping[str, float]]] | None = None,
    gguf: Mapping[str, str] | None = None,
    thinking: bool | None = None,
) -> ResolvedSampling:
    """Resolve each field by the module's precedence.

    flags: field -> the value the user typed, None (or absent) when not typed.
    registry_entry: from `registry_sets`; thinking picks its set (True: thinking,
    False: non_thinking, None: a flat set, else the thinking one, the template default of
    Qwen3-style models); a set lacking a field falls back to the flat set.
    gguf: `Session.sampling_metadata`.
    """
    order = {True: ("thinking", "default"), False: ("non_thinking", "default"), None: ("default", "thinking")}[thinking]
    sets: dict[str, Mapping[str, float]] = {}
    name = ""
    if registry_entry is not None:
        name, all_sets = registry_entry
        sets = {k: all_sets[k] for k in order if k in all_sets}
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    used = ""
    for f in FIELDS:
        given = flags.get(f)
        if given is not None:
            values[f], sources[f] = float(given), f"flag {FLAG_NAMES[f]}"
            continue
        hit = next(((k, s[f]) for k, s in sets.items() if f in s), None)
        if hit is not None:
            used = used or hit[0]
            label = f"registry {name}" + ("" if hit[0] == "default" else f", {hit[0].replace('_', '-')} set")
            values[f], sources[f] = float(hit[1]), label
            continue
        g = _gguf_value(gguf or {}, f)
        if g is not None:
            values[f], sources[f] = g, f"GGUF general.sampling.{f}"
            continue
        values[f], sources[f] = LLAMA_CPP_DEFAULTS[f], "llama.cpp default"
    cfg = SamplingConfig(temp=values["temp"], top_k=int(values["top_k"]), top_p=values["top_p"], min_p=values["min_p"])
    return ResolvedSampling(cfg, sources, used)


def resolve_for(
    session: object,
    target: str | None,
    flags: Mapping[str, float | int | None],
    thinking: bool | None,
) -> ResolvedSampling:
    """resolve_sampling with the registry entry of `target` and the session's GGUF metadata."""
    gguf = getattr(session, "sampling_metadata", None) or {}
    return resolve_sampling(flags, registry_entry=registry_sets(target), gguf=gguf, thinking=thinking)
