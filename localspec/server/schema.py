"""Request bodies -> what the session runs: a prompt, a GenConfig and the response options.

The server's own flags (`-n`, `--temp`, `--method`, ...) are the defaults; a request
overrides them field by field. Field names follow OpenAI, with llama-server's extensions
where it has them (`top_k`, `min_p`, `n_predict`, `speculative.n_max`, ...), so a client
written for llama-server works unchanged. Every refusal is an ApiError naming the field.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field

from localspec.config import METHODS, MIN_TEMP, SPECULATIVE, GenConfig
from localspec.server import logprobs as lp
from localspec.server.bounds import check_chat_bytes, check_message_count, check_prompt
from localspec.server.errors import ApiError, invalid, wrong_type
from localspec.server.fields import (
    at_least,
    check_keys,
    check_policy,
    get_bool,
    get_int,
    get_number,
    get_object,
    in_range,
)
from localspec.server.fim_fields import completion_fim
from localspec.server.messages import parse_messages, parse_prompt
from localspec.server.prediction import FIELDS as PREDICTION_FIELDS
from localspec.server.prediction import prediction_of
from localspec.server.structured import FIELDS as STRUCTURED
from localspec.server.structured import constraint_of
from localspec.server.thinking import FIELDS as REASONING_FIELDS
from localspec.server.thinking import check_template_kwargs, reasoning_budget, reasoning_format
from localspec.server.tools import FIELDS as TOOL_FIELDS
from localspec.server.tools import ToolRequest, parse_tools, template_tools, tool_constraint
from localspec.session import FimInput, Prompt
from localspec.settings import batch_minimum
from localspec.toolcall import Format

MAX_STOP = 64

_SPEC_KEYS = frozenset({"method", "K", "L", "n_max", "n_min", "p_min"})
_FLAT_SPEC = {"speculative.n_max": "n_max", "speculative.n_min": "n_min", "speculative.p_min": "p_min"}
_COMMON = frozenset({
    "model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "n_predict",
    "temperature", "top_p", "top_k", "min_p", "seed", "stop", "speculative", "localspec", *_FLAT_SPEC,
    *STRUCTURED, "n_indent", "t_max_predict_ms", *PREDICTION_FIELDS,
})
COMMON_FIELDS = _COMMON
CHAT_FIELDS = _COMMON | {"messages", "chat_template_kwargs"} | REASONING_FIELDS | lp.CHAT_FIELDS | TOOL_FIELDS
COMPLETION_FIELDS = _COMMON | {"prompt", "suffix"} | lp.COMPLETION_FIELDS


@dataclass
class Limits:
    """What the server was started with: the defaults a request starts from."""

    cfg: GenConfig
    n_ctx: int
    n_batch: int = 512
    n_seq_max: int = 16
    lenient: bool = False  # --ignore-unknown-fields
    reasoning_format: str = "auto"  # --reasoning-format (server/thinking.py)
    reasoning_budget: int | None = None  # --reasoning-budget
    template_kwargs: dict | None = None  # --reasoning on/off -> {"enable_thinking": ...}
    n_vocab: int | None = None  # token ids a prompt may hold (create_app fills it from the session)
    tool_format: Format | None = None  # the chat template's tool-call format (create_app: None = renders no tools)
    fim_missing: tuple[str, ...] = ()  # FIM tokens the model lacks (create_app fills it; server/infill.py)


@dataclass
class GenRequest:
    """One parsed request: everything the worker and the response builders need."""

    kind: str  # "chat" | "completion" | "infill"
    prompt: Prompt
    cfg: GenConfig
    prefill: str = ""
    template_kwargs: dict | None = None
    stream: bool = False
    include_usage: bool = False
    provenance: bool = False
    ignored: list[str] = field(default_factory=list)  # accepted fields that had no effect
    reasoning_format: str = "none"  # chat: "auto" / "deepseek" split reasoning_content out
    reasoning_budget: int | None = None  # chat: thinking tokens before the close is forced
    logprobs: int | None = None  # alternatives per token in `logprobs` (None: not asked; server/logprobs.py)
    echo: bool = False  # completions: the prompt's text (and log-probabilities) before the answer
    tools: ToolRequest | None = None  # chat: tools / tool_choice (server/tools.py)
    tool_format: Format | None = None  # how the answer's calls are written (toolcall/formats.py)
    settings: dict = field(default_factory=dict)  # the Messages / Responses request's own fields its answer repeats
    # fill-in-the-middle (/infill, /v1/completions with suffix): the worker asks the session
    # for its prompt tokens; `prompt` is then only the slot-similarity key (server/infill.py)
    fim: FimInput | None = None
    id_slot: int = -1  # /infill: echoed back, as llama-server does
    supersede: str | None = None  # /infill: the client key a newer request replaces this one by
    response_fields: list[str] | None = None  # /infill: llama-server's response_fields


def parse_chat(body: object, limits: Limits) -> GenRequest:
    """A /v1/chat/completions body."""
    body = _object(body)
    ignored = check_policy(body, CHAT_FIELDS, limits.lenient)
    if "messages" not in body:
        raise ApiError(400, "Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter")
    check_message_count(body["messages"], limits.n_ctx)  # before reading them one by one
    messages, prefill = parse_messages(body["messages"], limits.lenient, ignored)
    tools = parse_tools(body, limits.tool_format)
    check_chat_bytes(messages, prefill, limits.n_ctx, template_tools(tools).get("tools"))
    tk = get_object(body, "chat_template_kwargs")
    check_template_kwargs(tk)
    if limits.template_kwargs:  # the server's --reasoning, overridden by the request's own
        tk = {**limits.template_kwargs, **(tk or {})}
    if tools is not None and tools.active:
        tk = {**(tk or {}), **template_tools(tools)}
    asked = lp.parse_chat(body)
    cfg = gen_config(body, limits, ignored, asked)
    spec = tool_constraint(tools, limits.tool_format)
    if spec is not None:
        if constraint_of(body) is not None:  # checked again: gen_config read it already
            raise invalid("tool_choice", "Invalid 'tool_choice': a tool call and a response_format / grammar / "
                          "json_schema cannot both hold the answer; send tool_choice 'none' or drop the format.")
        cfg.constraint = spec
    req = GenRequest("chat", messages, cfg, prefill=prefill,
                     template_kwargs=tk, ignored=ignored,
                     reasoning_format=reasoning_format(body, limits.reasoning_format),
                     reasoning_budget=reasoning_budget(body, limits.reasoning_budget), logprobs=asked.top,
                     tools=tools if tools is not None and tools.active else None,
                     tool_format=limits.tool_format)
    response_options(body, req, limits.lenient)
    return req


def parse_completion(body: object, limits: Limits) -> GenRequest:
    """A /v1/completions body (raw text or token ids: no chat template)."""
    body = _object(body)
    ignored = check_policy(body, COMPLETION_FIELDS, limits.lenient)
    if "prompt" not in body:
        raise ApiError(400, "Missing required parameter: 'prompt'.", param="prompt", code="missing_required_parameter")
    prompt = parse_prompt(body["prompt"], limits.n_vocab)
    fim = completion_fim(body, prompt, limits.fim_missing)
    if fim is None:  # a FIM prompt is cut to the context as /infill cuts it
        check_prompt(prompt, limits.n_ctx)
    asked = lp.parse_completion(body)
    cfg = gen_config(body, limits, ignored, asked)
    if asked.echo and (asked.top is not None or not isinstance(prompt, str) or cfg.n_predict == 0):
        if fim is not None:
            raise invalid("echo", "Invalid 'echo': a fill-in-the-middle request (suffix) does not echo its prompt.")
        cfg.prompt_logprobs = asked.top or 0  # token ids' text and max_tokens 0 need the prompt pass
    req = GenRequest("completion", prompt, cfg, ignored=ignored, logprobs=asked.top, echo=asked.echo, fim=fim)
    response_options(body, req, limits.lenient)
    return req


def request_body(body: object, fields: frozenset[str], limits: Limits) -> tuple[dict, list[str]]:
    """The body as an object, and the unknown fields accepted (--ignore-unknown-fields);
    refuses a field that would change the answer (fields.py)."""
    body = _object(body)
    return body, check_policy(body, fields, limits.lenient)


def _object(body: object) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", code="invalid_body")
    return body


def response_options(body: Mapping[str, object], req: GenRequest, lenient: bool) -> None:
    req.stream = get_bool(body, "stream", False)
    so = get_object(body, "stream_options")
    if so is not None:
        check_keys(so, frozenset({"include_usage", "include_obfuscation", "continuous_usage_stats"}),
                   "stream_options", lenient, req.ignored)
        req.include_usage = get_bool(so, "include_usage", False, "stream_options.include_usage")
        if get_bool(so, "continuous_usage_stats", False, "stream_options.continuous_usage_stats"):
            raise invalid("stream_options.continuous_usage_stats", "usage is sent once, in the last chunk",
                          code="unsupported_value")
    ls = get_object(body, "localspec")
    if ls is not None:
        check_keys(ls, frozenset({"provenance"}), "localspec", lenient, req.ignored)
        req.provenance = get_bool(ls, "provenance", False, "localspec.provenance")


def _n_predict(body: Mapping[str, object], limits: Limits, lo: int = 1) -> int | None:
    given = {k: get_int(body, k) for k in ("max_completion_tokens", "max_tokens", "n_predict")}
    given = {k: v for k, v in given.items() if v is not None}
    if given.get("n_predict") == -1:  # llama-server: until end-of-turn or a full context
        given["n_predict"] = limits.n_ctx
    for k, v in given.items():
        at_least(k, v, lo)
    if len(set(given.values())) > 1:
        names = " and ".join(f"'{k}'" for k in given)
        raise invalid(next(iter(given)), f"{names} disagree: give one of them")
    return next(iter(given.values()), None)


def gen_config(body: Mapping[str, object], limits: Limits, ignored: list[str], asked: lp.Asked | None = None) -> GenConfig:
    cfg = copy.deepcopy(limits.cfg)
    n = _n_predict(body, limits, 0 if asked is not None and asked.echo else 1)  # echo + max_tokens 0: the prompt's scores alone
    if n is not None:
        cfg.n_predict = n
    s = cfg.sampling
    temp = get_number(body, "temperature")
    at_least("temperature", temp, 0)
    if temp is not None and 0 < temp < MIN_TEMP:
        raise invalid("temperature", f"Invalid 'temperature': {temp:g} is too small to sample with "
                      f"(below {MIN_TEMP:g}); use 0 for greedy decoding.")
    top_p = get_number(body, "top_p")
    in_range("top_p", top_p, 0.0, 1.0, lo_open=True)
    min_p = get_number(body, "min_p")
    in_range("min_p", min_p, 0.0, 1.0, hi_open=True)
    top_k = get_int(body, "top_k")
    s.temp = s.temp if temp is None else temp
    s.top_p = s.top_p if top_p is None else top_p
    s.min_p = s.min_p if min_p is None else min_p
    s.top_k = s.top_k if top_k is None else max(0, top_k)  # <= 0 means off, as in llama-server
    if "seed" in body:
        seed = get_int(body, "seed", lo=-1, hi=2**64 - 1)  # -1 / null: a random seed
        cfg.seed = None if seed in (None, -1) else seed
    cfg.stop = _stop(body.get("stop"), cfg.stop)
    # response_format / grammar / json_schema (server/structured.py); without one, serve's own
    # --grammar / -j (its flag, as llama-server's) holds for every request
    cfg.constraint = constraint_of(body) or cfg.constraint
    cfg.prediction = prediction_of(body)  # OpenAI's predicted outputs: drafts only (server/prediction.py)
    _speculative(body, cfg, limits.lenient, ignored)
    _fits(body, cfg, limits)
    if asked is not None:
        cfg.logprobs = asked.top
        lp.check_method(cfg)
    n_indent = get_int(body, "n_indent", lo=0)  # llama-server's code-completion stops (decode/lines.py)
    cfg.n_indent = cfg.n_indent if n_indent is None else n_indent
    t_max = get_number(body, "t_max_predict_ms")
    cfg.t_max_predict_ms = cfg.t_max_predict_ms if t_max is None else max(0.0, t_max)  # <= 0: no limit
    return cfg


def _fits(body: Mapping[str, object], cfg: GenConfig, limits: Limits) -> None:
    """Per-request K / L must fit the contexts the server made (llama.cpp aborts otherwise)."""
    if "speculative" not in body and not any(k in body for k in _FLAT_SPEC):
        return
    if cfg.method in SPECULATIVE and cfg.K + cfg.stacked + 1 > limits.n_seq_max:
        raise invalid("speculative.K", f"'speculative.K' {cfg.K} is too many: at most {limits.n_seq_max - 1} "
                      "drafts (each needs its own sequence besides the main one)")
    need, why = batch_minimum(cfg, limits.n_seq_max)
    if need > limits.n_batch:
        raise invalid("speculative", f"this setting needs target batches of {need} tokens but the server "
                      f"runs with --batch {limits.n_batch} ({why}); lower K or L, or restart with a larger --batch")


def _stop(value: object, default: list[str]) -> list[str]:
    if value is None:
        return list(default)
    if isinstance(value, str):
        return [value] if value else []
    if not isinstance(value, list):
        raise wrong_type("stop", "a string or an array of strings", value)
    if len(value) > MAX_STOP:
        raise invalid("stop", f"Invalid 'stop': at most {MAX_STOP} stop strings (got {len(value)}).")
    for i, s in enumerate(value):
        if not isinstance(s, str):
            raise wrong_type(f"stop[{i}]", "a string", s)
    return [s for s in value if s]


def _speculative(body: Mapping[str, object], cfg: GenConfig, lenient: bool, ignored: list[str]) -> None:
    """Per-request speculation: localspec's {method, K, L} and llama-server's {n_max, n_min, p_min}.

    n_max is L (the most draft tokens per iteration). p_min is llama-server's "stop drafting
    below this draft probability": localspec's auto method stops drafting with a rule
    calibrated on measured acceptance instead, so p_min > 0 keeps that rule and p_min = 0
    means "always draft L tokens" (no dynamic length). n_min ("drop drafts shorter than
    this") has no counterpart: accepted, validated, and listed in `localspec.ignored`.
    Neither changes the answer of a lossless method, only its speed.
    """
    spec = dict(get_object(body, "speculative") or {})
    check_keys(spec, _SPEC_KEYS, "speculative", lenient, ignored)
    for flat, key in _FLAT_SPEC.items():
        if body.get(flat) is not None:
            if spec.get(key) is not None and spec[key] != body[flat]:
                raise invalid(flat, f"'{flat}' and 'speculative.{key}' disagree")
            spec[key] = body[flat]
    method = spec.get("method")
    if method is not None:
        if not isinstance(method, str):
            raise wrong_type("speculative.method", "a string", method)
        if method not in METHODS:
            raise invalid("speculative.method", f"Invalid 'speculative.method': {method!r} (one of {', '.join(METHODS)})")
        cfg.method = method
    K = get_int(spec, "K", "speculative.K")
    at_least("speculative.K", K, 1)
    L = get_int(spec, "L", "speculative.L")
    at_least("speculative.L", L, 1)
    n_max = get_int(spec, "n_max", "speculative.n_max")
    at_least("speculative.n_max", n_max, 1)
    if L is not None and n_max is not None and L != n_max:
        raise invalid("speculative.n_max", "'speculative.n_max' is 'speculative.L' under llama-server's name; they disagree")
    L = L if L is not None else n_max
    if K is not None:
        cfg.K, cfg.auto_K = K, False
    if L is not None:
        cfg.L, cfg.auto_L = L, False
    n_min = get_int(spec, "n_min", "speculative.n_min")
    at_least("speculative.n_min", n_min, 0)
    if n_min is not None:
        if n_min > cfg.L:
            raise invalid("speculative.n_min", f"'speculative.n_min' {n_min} exceeds the draft length L={cfg.L}")
        ignored.append("speculative.n_min")
    p_min = get_number(spec, "p_min", "speculative.p_min")
    in_range("speculative.p_min", p_min, 0.0, 1.0)
    if p_min is not None:
        cfg.dynamic_draft = p_min > 0

