"""The fill-in-the-middle fields that /v1/completions and /infill share.

A leaf of the server room: schema.py (OpenAI's `suffix`) and infill.py (llama-server's
`input_*` fields, the /infill route) both read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from localspec.server.errors import ApiError, invalid, wrong_type
from localspec.session import FimInput


def check_fim(fim_missing: Sequence[str], param: str) -> None:
    """A 400 for a model without FIM tokens (llama-server's 'Infill is not supported')."""
    if fim_missing:
        raise ApiError(400, "Infill is not supported by this model: it has no fill-in-the-middle tokens "
                       f"(missing: {', '.join('fim_' + m for m in fim_missing)}); serve a FIM model "
                       "such as qwen2.5-coder", param=param, code="not_supported")


def completion_fim(body: Mapping[str, object], prompt: object, fim_missing: Sequence[str]) -> FimInput | None:
    """/v1/completions' `suffix` (OpenAI's insert mode): the prompt is the prefix."""
    suffix = body.get("suffix")
    if suffix is None or suffix == "":
        return None
    if not isinstance(suffix, str):
        raise wrong_type("suffix", "a string", suffix)
    check_fim(fim_missing, "suffix")
    if not isinstance(prompt, str):
        raise invalid("suffix", "Invalid 'suffix': fill-in-the-middle needs a text prompt (the text before the "
                      "cursor), not token ids")
    return FimInput(prompt, suffix)


def extra_chunks(extra: object) -> tuple[Mapping[str, str], ...]:
    """`input_extra` as llama-server takes it: [{"text": str, "filename"?: str}, ...]."""
    if extra is None:
        return ()
    if not isinstance(extra, list):
        raise wrong_type("input_extra", 'an array of {"filename": string, "text": string}', extra)
    out = []
    for i, chunk in enumerate(extra):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise invalid(f"input_extra[{i}]", f"Invalid 'input_extra[{i}]': a chunk must contain a \"text\" "
                          "field with a string value")
        name = chunk.get("filename", "tmp")
        if not isinstance(name, str):
            raise wrong_type(f"input_extra[{i}].filename", "a string", name)
        out.append({"filename": name, "text": chunk["text"]})
    return tuple(out)
