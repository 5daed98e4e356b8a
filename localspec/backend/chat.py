"""Chat template rendering from the GGUF's own jinja template.

Rendering the model's template (not a hard-coded one) is what makes any instruct GGUF work;
a ChatML fallback covers models without one.
"""

from __future__ import annotations

import datetime
import json
import secrets
from collections.abc import Mapping
from functools import lru_cache

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localspec.backend.model import Model
from localspec.errors import ConfigError, LocalspecError

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# what render() itself passes the template; a chat_template_kwargs key among these would
# collide with it (a TypeError before: "got multiple values") or shadow a global the
# template calls, so it is refused (ConfigError naming the key; the server answers 400)
PASSED = ("messages", "add_generation_prompt", "bos_token", "eos_token")


class ChatTemplateError(LocalspecError):
    """The chat template refused these messages or kwargs (its raise_exception, a value of
    the wrong type for it): input the caller can fix, not an engine failure."""


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: object, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """transformers' `tojson` (and llama.cpp's): keys in the given order, no HTML escaping.
    Jinja's own sorts keys and writes `<` as \u003c, so a tool's schema or a past call's
    arguments would reach the model unlike what it was trained on."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _env() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


RESERVED = frozenset(PASSED) | frozenset(_env().globals)  # jinja's own globals too (range, namespace, ...)


@lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    return _env().from_string(source)


class ChatTemplate:
    """Renders a conversation to the exact prompt text the model was trained on."""

    def __init__(self, model: Model) -> None:
        self.source = model.chat_template() or CHATML
        self.bos_text = model.token_text(model.bos).decode("utf-8", "replace") if model.bos >= 0 else ""
        self.eos_text = model.token_text(model.eos).decode("utf-8", "replace") if model.eos >= 0 else ""
        self._template = _compile(self.source)

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
               template_kwargs: Mapping[str, object] | None = None) -> str:
        """Prompt text for these messages (the template decides whether to include BOS).

        `template_kwargs` reach the template as variables (chat_template_kwargs such as
        enable_thinking), as llama-server passes them; a name in RESERVED is refused (a
        mapping, not **kwargs: a colliding name must reach this check, not fail the call)."""
        extra = dict(template_kwargs or {})
        taken = sorted(RESERVED & set(extra))
        if taken:
            raise ConfigError(f"template kwarg {taken[0]!r} is reserved: the chat template gets it from "
                              f"localspec itself (reserved: {', '.join(sorted(RESERVED))})")
        try:
            return self._template.render(
                **extra,
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_text,
                eos_token=self.eos_text,
            )
        except Exception as e:  # noqa: BLE001 - the template ran on the caller's input
            raise ChatTemplateError(f"the chat template refused this request: {type(e).__name__}: {e}") from e

    def render_marked(self, messages: list[dict[str, str]],
                      template_kwargs: Mapping[str, object] | None = None) -> tuple[str, list[tuple[int, int]]]:
        """render() with the generation prompt, and where each message's text lies in it.

        The messages are rendered once as given and once with every text field wrapped in
        markers that cannot occur by chance; the wrapped rendering, markers removed, must be
        the same text, and then the markers tell the spans. A template that trims a text
        changes it: tried again with the texts stripped. Any other change (a template that
        cuts or rewrites message text) raises ChatTemplateError: the text could not be told
        apart from the template's own."""
        text = self.render(messages, True, template_kwargs)
        for strip in (False, True):
            nonce = secrets.token_hex(8)
            opening, closing = f"\ue000{nonce}\ue001", f"\ue002{nonce}\ue003"
            wrapped = [_wrap(m, opening, closing, strip) for m in messages]
            spans = _unwrap(self.render(wrapped, True, template_kwargs), opening, closing, text)
            if spans is not None:
                return text, spans
        raise ChatTemplateError("this model's chat template changes message text, so it cannot be told apart "
                                "from the template's own text (--no-special-in-content)")


def _wrap(message: dict[str, str], opening: str, closing: str, strip: bool) -> dict[str, str]:
    """The message with each non-empty text field (all but its role) inside the markers."""
    out = dict(message)
    for key, value in message.items():
        if key != "role" and isinstance(value, str) and value:
            out[key] = opening + (value.strip() if strip else value) + closing
    return out


def _unwrap(marked: str, opening: str, closing: str, expect: str) -> list[tuple[int, int]] | None:
    """The spans between markers in `marked` once they are removed, or None unless the
    text left is `expect` (the markers changed what the template did)."""
    pieces: list[str] = []
    spans: list[tuple[int, int]] = []
    at = pos = 0
    while True:
        a = marked.find(opening, at)
        if a < 0:
            pieces.append(marked[at:])
            break
        b = marked.find(closing, a + len(opening))
        if b < 0:
            return None
        pieces.append(marked[at:a])
        pos += a - at
        pieces.append(marked[a + len(opening) : b])
        spans.append((pos, pos + b - a - len(opening)))
        pos = spans[-1][1]
        at = b + len(closing)
    clean = "".join(pieces)
    if clean != expect or opening in clean or closing in clean:
        return None
    return [s for s in spans if s[0] < s[1]]
