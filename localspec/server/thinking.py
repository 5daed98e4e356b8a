"""Thinking models behind the server: `reasoning_content`, the thinking switch and budget.

As llama-server with `--reasoning-format deepseek` (its default, "auto", does the same for
templates that think): the model's `<think>…</think>` block goes to
`message.reasoning_content` (streaming: `delta.reasoning_content`) and `content` holds the
answer alone. Per request: `reasoning_format` ("auto" | "deepseek" | "none": leave the
block in `content`), `chat_template_kwargs.enable_thinking` (the template's switch,
forwarded as given), and `reasoning_budget` (llama-server's names `reasoning_budget_tokens`
and `thinking_budget_tokens` too; -1 = no limit, 0 = close the block at once; see
localspec.thinking.budget for the forced close). Past assistant turns a client sends back
go to the template with their answer only (reasoning_content dropped, a `<think>` block
stripped), the model card's rule, whatever the template does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from localspec.events import Event
from localspec.server.errors import invalid, wrong_type
from localspec.server.fields import at_least, get_int
from localspec.session import Session
from localspec.thinking.budget import ThinkingRun, think
from localspec.thinking.split import answer_only, markers_of

FORMATS = ("auto", "deepseek", "none")
BUDGET_FIELDS = ("reasoning_budget", "reasoning_budget_tokens", "thinking_budget_tokens")
FIELDS = frozenset({"reasoning_format", *BUDGET_FIELDS})


def reasoning_format(body: Mapping[str, object], default: str) -> str:
    value = body.get("reasoning_format")
    if value is None:
        return default
    if not isinstance(value, str):
        raise wrong_type("reasoning_format", "a string", value)
    if value not in FORMATS:
        raise invalid("reasoning_format", f"Invalid 'reasoning_format': {value!r} (one of {', '.join(FORMATS)})",
                      code="unsupported_value")
    return value


def reasoning_budget(body: Mapping[str, object], default: int | None) -> int | None:
    """The thinking budget in tokens (None: no limit); the names must agree when several are sent."""
    given = {k: get_int(body, k) for k in BUDGET_FIELDS}
    given = {k: v for k, v in given.items() if v is not None}
    for k, v in given.items():
        at_least(k, v, -1)
    if len(set(given.values())) > 1:
        raise invalid(next(iter(given)), " and ".join(f"'{k}'" for k in given) + " disagree: give one of them")
    value = next(iter(given.values()), default)
    return None if value is None or value < 0 else value


# what localspec's renderer gives the chat template itself (backend/chat.py RESERVED: its
# own variables and the template's globals); tests/test_server_fuzz.py keeps the two equal
RESERVED_TEMPLATE_NAMES = frozenset({
    "messages", "add_generation_prompt", "bos_token", "eos_token", "raise_exception", "strftime_now",
    "range", "dict", "lipsum", "cycler", "joiner", "namespace",
})


def check_template_kwargs(kwargs: Mapping[str, object] | None) -> None:
    """enable_thinking must be a boolean (llama-server refuses a string too); a name the
    renderer passes itself (`messages`, `bos_token`, ...) is refused with a 400 naming it
    (llama-server lets it override the template's variable; here it used to be a 500)."""
    if not kwargs:
        return
    taken = sorted(RESERVED_TEMPLATE_NAMES & set(kwargs))
    if taken:
        param = f"chat_template_kwargs.{taken[0]}"
        raise invalid(param, f"Invalid '{param}': {taken[0]!r} is set by the server itself when it renders the "
                      f"chat template and cannot be passed (reserved: {', '.join(sorted(RESERVED_TEMPLATE_NAMES))})",
                      code="reserved_parameter")
    if "enable_thinking" in kwargs and not isinstance(kwargs["enable_thinking"], bool):
        raise wrong_type("chat_template_kwargs.enable_thinking", "a boolean", kwargs["enable_thinking"])


def splits(session: Session, fmt: str) -> bool:
    """Whether responses carry reasoning_content apart (the model thinks and the format asks)."""
    return fmt != "none" and markers_of(session) is not None


def start(session: Session, req) -> Iterator[Event] | ThinkingRun:
    """The events of one request: a ThinkingRun for chat on a thinking model (split, budget,
    history rule), the session's own generate() otherwise. Bad input raises here."""
    if req.fim is not None:  # fill-in-the-middle: the target's own FIM format (server/infill.py)
        return session.generate(session.fim_prompt(req.fim, req.cfg.n_predict), req.cfg)
    if req.kind != "chat" or markers_of(session) is None:
        return session.generate(req.prompt, req.cfg, prefill=req.prefill, template_kwargs=req.template_kwargs)
    prompt = answer_only(req.prompt, markers_of(session))
    return think(session, prompt, req.cfg, prefill=req.prefill, template_kwargs=req.template_kwargs,
                 budget=req.reasoning_budget)
