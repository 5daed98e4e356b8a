"""A rendered prompt's tokens: what the session decodes, reused where it already has them.

Tokenization is not unique: re-tokenizing a previous answer can give other ids than the
ones generated, which would force the KV cache to re-evaluate it. So a prompt that extends
the previous prompt + answer (a chat client resending its history) keeps the previous ids
and tokenizes only what is new (RuntimeSession's turns; KVState.sync still keeps the longest
common token prefix when it does not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from localspec.backend.chat import ChatTemplate
from localspec.backend.model import Model

# the previous turn: (its prompt text, or None for a plain-text one; its prompt tokens; the
# tokens generated; the answer's text)
LastTurn = tuple[str | None, list[int], list[int], str]


def fresh_tokens(tm: Model, template: ChatTemplate, prompt_text: str) -> list[int]:
    """Tokens of a rendered prompt, tokenized whole (BOS added unless the template wrote it)."""
    add_bos = tm.add_bos and not (tm.bos >= 0 and prompt_text.startswith(template.bos_text or "\0"))
    return ([tm.bos] if add_bos else []) + tm.tokenize(prompt_text, add_special=False)


def prompt_tokens(tm: Model, template: ChatTemplate, prompt_text: str, last: LastTurn | None) -> list[int]:
    """Tokens of a rendered prompt, reusing the previous generation's exact tokens when the
    text extends the previous prompt + answer (the module docstring)."""
    if last is not None and last[0] is not None:
        prev_text, prev_tokens, gen, answer = last
        known = prev_text + answer
        if answer and prompt_text.startswith(known) and tm.detokenize(gen) == answer:
            return prev_tokens + gen + tm.tokenize(prompt_text[len(known) :], add_special=False)
    return fresh_tokens(tm, template, prompt_text)


def plain_tokens(tm: Model, template: ChatTemplate, messages: Sequence[Mapping[str, str]],
                 template_kwargs: Mapping[str, object] | None, prefill: str) -> list[int]:
    """Prompt tokens where the messages' text and the prefill are plain text (their
    `<|im_start|>` is not the control token); the template's own markers still are."""
    text, spans = template.render_marked([dict(m) for m in messages], template_kwargs)
    spans.append((len(text), len(text) + len(prefill)))
    text += prefill
    bos_in_text = tm.bos >= 0 and text.startswith(template.bos_text or "\0") and spans[0][0] > 0
    return ([tm.bos] if tm.add_bos and not bos_in_text else []) + tm.tokenize_plain(text, spans)
