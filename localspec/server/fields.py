"""Which request fields localspec serve honours, accepts as harmless, or refuses.

Clients send far more than the fields a server builds: the SDK sends `n: 1`, Continue sends
zero penalties, Open WebUI forwards whatever a user typed in its "advanced parameters"
(llama-server's `repeat_penalty`, `mirostat`, ...). The rule: a field is accepted only if it
cannot change the answer: either it never does (`user`, `metadata`, `cache_prompt`), or it
carries its neutral value (`n: 1`, `presence_penalty: 0`, `logprobs: false`). Anything that
would change the answer and is not built is a 400 naming the field; a field nobody listed
here is refused too (it might change the answer), unless the server runs with
--ignore-unknown-fields, and then the response lists it under `localspec.ignored`.

The typed getters give OpenAI's own error wording ("Invalid type for 'max_tokens': ...").
"""

from __future__ import annotations

from collections.abc import Mapping

from localspec.server.errors import ApiError, invalid, unknown, unsupported, wrong_type

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# Accepted with any value: they never change the generated text.
HARMLESS = frozenset({
    "user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key",
    "cache_prompt", "id_slot", "n_keep", "timings_per_token",  # llama-server: KV reuse is always on
    "mirostat_tau", "mirostat_eta", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
    "dry_sequence_breakers", "repeat_last_n", "penalty_last_n", "xtc_threshold",
    "dynatemp_exponent",  # parameters of samplers that are off unless their switch below is on
})

_NOT_BUILT = "localspec's samplers are temperature, top-k, top-p and min-p"
_ONE = "localspec serve generates one answer per request; send several requests"
_NO_TOOLS = "tools are served on /v1/chat/completions only"
_NO_LOGPROBS = "log-probabilities are not returned"

# field -> (neutral values, why any other value is refused). None is always accepted.
NEUTRAL: dict[str, tuple[tuple[object, ...], str]] = {
    "n": ((1,), _ONE),
    "best_of": ((1,), _ONE),
    "presence_penalty": ((0,), _NOT_BUILT),
    "frequency_penalty": ((0,), _NOT_BUILT),
    "repeat_penalty": ((1,), _NOT_BUILT),
    "repetition_penalty": ((1,), _NOT_BUILT),
    "typical_p": ((1,), _NOT_BUILT),
    "tfs_z": ((1,), _NOT_BUILT),
    "mirostat": ((0,), _NOT_BUILT),
    "dynatemp_range": ((0,), _NOT_BUILT),
    "xtc_probability": ((0,), _NOT_BUILT),
    "dry_multiplier": ((0,), _NOT_BUILT),
    "top_n_sigma": ((-1, 0), _NOT_BUILT),
    "min_keep": ((0,), _NOT_BUILT),
    "logit_bias": (({}, []), "logit bias is not built"),
    "logprobs": ((False, 0), _NO_LOGPROBS),
    "top_logprobs": ((0,), _NO_LOGPROBS),
    "n_probs": ((0,), _NO_LOGPROBS),
    "echo": ((False,), "the prompt is not echoed back"),
    "tools": (([],), _NO_TOOLS),
    "functions": (([],), _NO_TOOLS),
    "tool_choice": (("none", "auto"), _NO_TOOLS),
    "function_call": (("none", "auto"), _NO_TOOLS),
    "parallel_tool_calls": ((True, False), _NO_TOOLS),
    "ignore_eos": ((False,), "the answer always ends at the model's end-of-turn token"),
    "min_tokens": ((0,), "a minimum answer length is not built"),
    "lora": (([],), "LoRA adapters are not built"),
    "audio": ((), "the models are text-only"),
    "modalities": ((["text"],), "the models are text-only"),
    "web_search_options": ((), "web search is not built"),
    "reasoning_effort": ((), "use chat_template_kwargs (e.g. {\"enable_thinking\": false}) instead"),
    "include_stop_str_in_output": ((False,), "stop strings are never included in the answer"),
    "add_generation_prompt": ((True,), "the chat template's generation prompt is always added"),
}


def _is_neutral(value: object, neutral: tuple[object, ...]) -> bool:
    for n in neutral:
        if isinstance(n, bool) or isinstance(value, bool):
            if value is n:
                return True
        elif isinstance(n, int | float) and isinstance(value, int | float):
            if value == n:  # exact across int / float (float() of a 400-digit int overflows)
                return True
        elif value == n:
            return True
    return False


def check_policy(body: Mapping[str, object], handled: frozenset[str], lenient: bool) -> list[str]:
    """Refuse fields that would change the answer; return the unknown ones accepted (lenient)."""
    ignored: list[str] = []
    for key, value in body.items():
        if key in handled or key in HARMLESS:
            continue
        if key in NEUTRAL:
            neutral, why = NEUTRAL[key]
            if value is not None and not _is_neutral(value, neutral):
                raise unsupported(key, why)
            continue
        if lenient:
            ignored.append(key)
        else:
            raise unknown(key)
    return ignored


# --------------------------------------------------------------------------- typed getters
def get_bool(body: Mapping[str, object], key: str, default: bool, param: str | None = None) -> bool:
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise wrong_type(param or key, "a boolean", v)
    return v


def get_int(body: Mapping[str, object], key: str, param: str | None = None, *,
            lo: int = INT32_MIN, hi: int = INT32_MAX) -> int | None:
    """An integer field within [lo, hi] (llama.cpp's int32 unless the field says otherwise):
    JSON integers have no size, and one past what the engine stores is an OverflowError
    deep inside it, or a silently wrapped value."""
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():  # JavaScript clients send 256.0
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise wrong_type(param or key, "an integer", v)
    if not lo <= v <= hi:
        name = param or key
        raise invalid(name, f"Invalid '{name}': {_short(v)} is out of range ({lo}..{hi}).")
    return v


def get_number(body: Mapping[str, object], key: str, param: str | None = None) -> float | None:
    """A number field as a finite float (body.py already refused NaN and 1e999; an integer
    beyond a double's range would raise OverflowError here)."""
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise wrong_type(param or key, "a number", v)
    try:
        return float(v)
    except OverflowError:
        name = param or key
        raise invalid(name, f"Invalid '{name}': {_short(v)} is out of range for a number.") from None


def _short(v: int) -> str:
    """An integer for a message: huge ones by their digit count, not 4,000 digits."""
    text = str(v)
    return text if len(text) <= 24 else f"{text[:8]}... ({len(text)} digits)"


def get_object(body: Mapping[str, object], key: str, param: str | None = None) -> dict | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise wrong_type(param or key, "an object", v)
    return v


def check_keys(obj: Mapping[str, object], allowed: frozenset[str], prefix: str, lenient: bool,
               ignored: list[str]) -> None:
    """Unknown keys of a nested object (`speculative`, `localspec`, a message)."""
    for key in obj:
        if key not in allowed:
            if not lenient:
                raise unknown(f"{prefix}.{key}")
            ignored.append(f"{prefix}.{key}")


def at_least(param: str, value: int | float | None, lo: float) -> None:
    if value is not None and value < lo:
        raise ApiError(400, f"Invalid '{param}': {value} is below the minimum of {lo:g}.",
                       param=param, code="invalid_value")


def in_range(param: str, value: float | None, lo: float, hi: float, *, lo_open: bool = False,
             hi_open: bool = False) -> None:
    if value is None:
        return
    if value < lo or value > hi or (lo_open and value == lo) or (hi_open and value == hi):
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise invalid(param, f"Invalid '{param}': {value:g} is not in {left}{lo:g}, {hi:g}{right}.")
