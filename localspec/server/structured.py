"""Structured output on the server: OpenAI's `response_format` and llama-server's `grammar` /
`json_schema` fields become the engine's constraint (GenConfig.constraint).

    {"response_format": {"type": "json_object"}}                          any JSON object
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {...}, "strict": true}}}
    {"grammar": "root ::= ..."}                                            llama.cpp GBNF
    {"json_schema": {...}}                                                 llama-server's field

At most one of them per request. Each is compiled here, before the request queues, so a
grammar that does not compile or a schema llguidance cannot handle is a 400 naming the field
and llguidance's reason in one line (the engine compiles it against the model's vocabulary
again, once per distinct spec; what only the vocabulary can refuse is a 400 from there).
`strict` is accepted either way: the answer is held to the schema always (llguidance's
JSON schema support, docs/server.md#structured-output).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from localspec.constrain.spec import ConstraintSpec
from localspec.errors import ConfigError
from localspec.server.errors import ApiError, invalid, wrong_type

FIELDS = frozenset({"response_format", "grammar", "json_schema"})


def constraint_of(body: Mapping[str, object]) -> ConstraintSpec | None:
    """The request's constraint, or None (no field, `{"type": "text"}`, an empty grammar)."""
    given = [(k, body[k]) for k in ("response_format", "grammar", "json_schema") if _set(k, body.get(k))]
    if not given:
        return None
    if len(given) > 1:
        raise invalid(given[1][0], f"Invalid '{given[1][0]}': send one of response_format, grammar and "
                      f"json_schema, not '{given[0][0]}' as well.")
    key, value = given[0]
    if key == "response_format":
        spec = _response_format(value)
    elif key == "grammar":
        if not isinstance(value, str):
            raise wrong_type("grammar", "a string", value)
        spec = ConstraintSpec("gbnf", value, origin="grammar")
    else:
        if not isinstance(value, dict):
            raise wrong_type("json_schema", "an object", value)
        spec = ConstraintSpec("json_schema", json.dumps(value), origin="json_schema")
    try:
        spec.grammar()
    except ConfigError as e:
        raise ApiError(400, f"Invalid '{key}': {e}", param=key, code="invalid_grammar") from None
    return spec


def _set(key: str, value: object) -> bool:
    if value is None:
        return False
    if key == "response_format":
        return not (isinstance(value, dict) and value.get("type") == "text")
    return value not in ("", {})


def _response_format(rf: object) -> ConstraintSpec:
    if not isinstance(rf, dict):
        raise wrong_type("response_format", "an object", rf)
    kind = rf.get("type")
    if kind == "json_object":
        return ConstraintSpec("json_object", origin="response_format")
    if kind != "json_schema":
        raise invalid("response_format.type", f"Invalid value for 'response_format.type': {kind!r}; "
                      "use 'text', 'json_object' or 'json_schema'.")
    js = rf.get("json_schema")
    if not isinstance(js, dict) or not isinstance(js.get("schema"), dict):
        raise invalid("response_format.json_schema", "Invalid 'response_format.json_schema': an object "
                      "with a 'schema' object is required.", code="missing_required_parameter")
    return ConstraintSpec("json_schema", json.dumps(js["schema"]), origin="response_format")
