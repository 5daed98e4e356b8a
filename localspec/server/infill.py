"""Fill-in-the-middle on the server: llama-server's `/infill`, and `suffix` on /v1/completions.

Editors (llama.vscode, llama.vim, Continue's llama.cpp provider) send the text around the
cursor as `input_prefix` / `input_suffix`, neighbouring files as `input_extra` chunks, and
expect llama-server's non-OpenAI answer (`content`, `stop`, `tokens_predicted`, `timings`;
streamed as one such object per event and no `[DONE]`). The prompt is made by the session
from the target's own FIM tokens (Session.fim_prompt, cut to the context as llama-server
cuts it); a model without them is a 400 before anything runs.

Editors type: each keystroke sends a new request and the old answer is no longer wanted.
A FIM request therefore *supersedes* the previous one from the same client, which is
stopped within one decoding iteration (or skipped if still queued). The client is its
`id_slot` when it sends one >= 0 (two editors on one machine: give each its own), else its
network address (one editor per machine, the usual case) -- see `supersede_key`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from localspec.events import Done
from localspec.server.errors import ApiError, wrong_type
from localspec.server.fields import get_int
from localspec.server.fim_fields import check_fim, extra_chunks
from localspec.server.schema import (
    COMMON_FIELDS,
    GenRequest,
    Limits,
    gen_config,
    request_body,
    response_options,
)
from localspec.server.stream import localspec_info, timings
from localspec.session import FimInput

INFILL_FIELDS = COMMON_FIELDS | {
    "input_prefix", "input_suffix", "input_extra", "prompt", "id_slot", "max_lines", "response_fields",
    "samplers", "t_max_prompt_ms",
}
# accepted for llama.vscode's sake and listed in `localspec.ignored`: the sampler chain is
# localspec's own (temperature, top-k, top-p, min-p), and the prompt is never cut short by time
NOT_APPLIED = ("samplers", "t_max_prompt_ms")
STOP_TYPE = {"eog": "eos", "stop": "word", "max_tokens": "limit", "limit": "limit", "context_full": "limit",
             "interrupted": "none"}


def parse_infill(body: object, limits: Limits) -> GenRequest:
    """An /infill body (llama-server's fields)."""
    body, ignored = request_body(body, INFILL_FIELDS, limits)
    check_fim(limits.fim_missing, "input_prefix")
    texts = {}
    for key in ("input_prefix", "input_suffix"):
        if key not in body:
            raise ApiError(400, f"Missing required parameter: '{key}'.", param=key, code="missing_required_parameter")
    for key in ("input_prefix", "input_suffix", "prompt"):
        v = body.get(key, "")
        if not isinstance(v, str):
            raise wrong_type(key, "a string", v)
        texts[key] = v
    fim = FimInput(texts["input_prefix"], texts["input_suffix"], extra_chunks(body.get("input_extra")),
                   texts["prompt"])
    req = GenRequest("infill", _key_text(fim), gen_config(body, limits, ignored), ignored=ignored, fim=fim)
    max_lines = get_int(body, "max_lines", lo=0)
    if max_lines is not None:
        req.cfg.max_lines = max_lines
    slot = get_int(body, "id_slot")
    req.id_slot = -1 if slot is None else slot
    req.supersede = f"slot {slot}" if slot is not None and slot >= 0 else None
    req.response_fields = _response_fields(body.get("response_fields"))
    ignored.extend(k for k in NOT_APPLIED if body.get(k) is not None)
    response_options(body, req, limits.lenient)
    return req


def supersede_key(req: GenRequest, client_host: str | None) -> str | None:
    """Which earlier FIM request this one replaces: the same id_slot, else the same address."""
    if req.fim is None:
        return None
    return req.supersede or f"host {client_host or '?'}"


def _key_text(fim: FimInput) -> str:
    """What the prompt starts with, as text (the worker's slot-similarity key): the extra
    chunks come first in a FIM prompt, then the prefix."""
    return "".join(c["text"] for c in fim.extra) + fim.prefix


def _response_fields(value: object) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise wrong_type("response_fields", "an array of strings", value)
    return list(value)


def nested_values(paths: Sequence[str], obj: Mapping[str, object]) -> dict:
    """llama-server's json_get_nested_values: each "a/b" path that exists, under its path."""
    out: dict = {}
    for path in paths:
        cur: object = obj
        for k in path.split("/"):
            if not isinstance(cur, Mapping) or k not in cur:
                break
            cur = cur[k]
        else:
            out[path] = cur
    return out


class InfillShapes:
    """llama-server's /infill bodies (the /completion shape), with localspec's object."""

    def __init__(self, req: GenRequest, model: str, draft: str | None = None) -> None:
        self.req, self.model, self.draft = req, model, draft
        self._predicted = 0

    def first(self) -> dict | None:
        return None

    def _head(self, content: str, stop: bool) -> dict:
        return {"index": 0, "content": content, "tokens": [], "stop": stop, "id_slot": self.req.id_slot}

    def delta(self, segments: list[dict], logprobs: dict | None = None) -> dict:
        """(`logprobs`: the chat path's argument; /infill takes no logprobs field, so None.)"""
        self._predicted += sum(s["tokens"] for s in segments)
        body = self._head("".join(s["text"] for s in segments), False)
        body["tokens_predicted"] = self._predicted
        if self.req.provenance:
            body["localspec"] = {"provenance": segments}
        return body

    def response(self, done: Done, queue_seconds: float, segments: list[dict],
                 split: tuple[str, str] | None = None, logprobs: dict | None = None,
                 prefix: object = None) -> dict:
        return self._final(done, queue_seconds, done.text, segments if self.req.provenance else None)

    def final(self, done: Done, queue_seconds: float, logprobs: dict | None = None) -> list[dict]:
        return [self._final(done, queue_seconds, "", None)]  # streamed: the text went in the deltas

    def _final(self, done: Done, queue_seconds: float, content: str, segments: list[dict] | None) -> dict:
        st = done.stats
        body = self._head(content, True)
        body.update({
            "model": self.model,
            "tokens_predicted": st.n_tokens,
            "tokens_evaluated": st.prompt_tokens,
            "has_new_line": "\n" in done.text,
            "truncated": done.reason == "context_full",
            "stop_type": STOP_TYPE.get(done.reason, "none"),
            "stopping_word": "",
            "tokens_cached": max(0, st.prompt_tokens - st.prompt_evaluated),
            "timings": timings(st, queue_seconds),
        })
        info = localspec_info(done, self.req, queue_seconds, self.draft)
        if segments is not None:
            info["provenance"] = segments
        body["localspec"] = info
        if self.req.response_fields is not None:
            return nested_values(self.req.response_fields, body)
        return body
