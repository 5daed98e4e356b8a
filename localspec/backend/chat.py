"""Chat template rendering from the GGUF's own jinja template.

Rendering the model's template (not a hard-coded one) is what makes any instruct GGUF work;
a ChatML fallback covers models without one.
"""

from __future__ import annotations

import datetime
from functools import lru_cache

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localspec.backend.model import Model

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


@lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(source)


class ChatTemplate:
    """Renders a conversation to the exact prompt text the model was trained on."""

    def __init__(self, model: Model) -> None:
        self.source = model.chat_template() or CHATML
        self.bos_text = model.token_text(model.bos).decode("utf-8", "replace") if model.bos >= 0 else ""
        self.eos_text = model.token_text(model.eos).decode("utf-8", "replace") if model.eos >= 0 else ""
        self._template = _compile(self.source)

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True, **extra: object) -> str:
        """Prompt text for these messages (the template decides whether to include BOS).

        `extra` reaches the template as variables (chat_template_kwargs such as
        enable_thinking), as llama-server passes them."""
        return self._template.render(
            **extra,
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_text,
            eos_token=self.eos_text,
        )
