"""What a GGUF says about how it wants to be used: its thinking markers and sampling.

Both are read from the model file rather than assumed, because they differ by family:
Qwen3, QwQ and the DeepSeek-R1 distills write `<think>…</think>`, Magistral `[THINK]…[/THINK]`,
Kimi `◁think▷…◁/think▷`; and llama.cpp defines `general.sampling.*` metadata keys (this
version's src/llama-arch.cpp) that a converter may fill with the model card's recommended
sampling (llama.cpp's common_init_sampler_from_model applies them unless a flag is given).
"""

from __future__ import annotations

import re

from localspec.backend.model import Model
from localspec.session import ThinkMarkers

# Spelled by the model families above; tried only after what the template itself names.
KNOWN_MARKERS = (("<think>", "</think>"), ("[THINK]", "[/THINK]"), ("◁think▷", "◁/think▷"))

# <X>…</X>, [X]…[/X], ◁X▷…◁/X▷ where X mentions "think"
_PAIR_RE = re.compile(r"(<|\[|◁)/([^<>\[\]◁▷\s'\"]*think[^<>\[\]◁▷\s'\"]*)(>|\]|▷)", re.IGNORECASE)

# the general.sampling.* keys localspec's samplers can honour (llama.cpp names)
SAMPLING_KEYS = ("temp", "top_k", "top_p", "min_p")


def template_marker_pairs(source: str | None) -> list[tuple[str, str]]:
    """(open, close) pairs the chat template writes: every `</X>` with a matching `<X>`."""
    pairs: list[tuple[str, str]] = []
    for m in _PAIR_RE.finditer(source or ""):
        lo, name, hi = m.groups()
        pair = (f"{lo}{name}{hi}", f"{lo}/{name}{hi}")
        if pair[0] in (source or "") and pair not in pairs:
            pairs.append(pair)
    return pairs


def _single_token(model: Model, text: str) -> int | None:
    """The id of the vocabulary token whose text is exactly `text`, if there is one."""
    ids = model.tokenize(text, add_special=False, parse_special=True)
    if len(ids) == 1 and model.token_text(ids[0]) == text.encode():
        return ids[0]
    return None


def find_think_markers(model: Model, template_source: str | None) -> ThinkMarkers | None:
    """The target's reasoning-block markers, or None for a model that does not think.

    A pair the template names comes first, then the known spellings; a pair whose two
    markers are single vocabulary tokens wins ("vocab": what the model actually emits), a
    pair only the template names is kept as a fallback ("template": multi-token).
    """
    template_pairs = template_marker_pairs(template_source)
    fallback: ThinkMarkers | None = None
    for open_, close in [*template_pairs, *KNOWN_MARKERS]:
        a, b = _single_token(model, open_), _single_token(model, close)
        if a is not None and b is not None:
            return ThinkMarkers(open_, close, (a,), (b,), "vocab")
        if fallback is None and (open_, close) in template_pairs:
            fallback = ThinkMarkers(open_, close, tuple(model.tokenize(open_, add_special=False)),
                                    tuple(model.tokenize(close, add_special=False)), "template")
    return fallback


def sampling_metadata(model: Model) -> dict[str, str]:
    """The general.sampling.* values present in the GGUF ({} for almost every file today)."""
    out = {}
    for key in SAMPLING_KEYS:
        value = model.meta(f"general.sampling.{key}")
        if value is not None:
            out[f"general.sampling.{key}"] = value
    return out
