"""Request bodies before the schema sees them: the JSON a client may send, and what it may not.

Python's json module accepts more than the rest of the server can carry, and each gap used
to be a 500 with a traceback: nesting deep enough to exhaust the recursion limit (a 200 KB
body of brackets), lone UTF-16 surrogates (`"\\ud800"` is valid JSON but not a character,
so encoding it for the tokenizer or for an error message fails), numbers that overflow to
infinity (`1e999`) or the NaN / Infinity constants. Each is refused here with a 400 in
OpenAI's shape, before any field is read; what the fields may hold (ranges, types) is
fields.py's business. The Content-Type rule (415 unless application/json) is what makes a
browser on another site unable to POST here without a CORS preflight (guard.py).
"""

from __future__ import annotations

import json
import math
import operator
import re
from itertools import accumulate, count

from starlette.requests import Request

from localspec.server.errors import ApiError

MAX_DEPTH = 64  # arrays / objects inside each other; real bodies use 4 or 5
JSON_MEDIA = "application/json"

# A JSON string literal, or an unterminated one up to the end of the text: every quote
# starts a match that succeeds, so a sub() never retries from inside a failed string (with
# a closing quote required, `"\"\"\"...` made it quadratic: 10 s for 64 KB).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]", re.ASCII)  # how a lone surrogate gets in
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_content_type(request: Request) -> None:
    """415 unless the body says it is JSON (a charset parameter is fine).

    Browsers send text/plain, form and multipart bodies to any site without asking it
    first; refusing them means a web page can only reach this server through a CORS
    preflight, which guard.py answers for the --cors origins alone."""
    header = request.headers.get("content-type", "")
    media = header.split(";", 1)[0].strip().lower()
    if media != JSON_MEDIA:
        got = f"'{header}'" if header else "none"
        raise ApiError(415, f"Unsupported Content-Type {got}: send the body as JSON with "
                       "'Content-Type: application/json'.", code="unsupported_media_type")


async def read_json(request: Request, limit: int) -> object:
    """The parsed body of a POST: 415, 413 or 400 (never 500) when it is not acceptable JSON."""
    check_content_type(request)
    too_big = ApiError(413, f"the request body is larger than the server's limit of {limit} bytes",
                       code="request_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_big
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise too_big
    return loads(bytes(data))


def loads(data: bytes) -> object:
    """JSON text -> Python objects, or a 400 naming what is wrong with it."""
    encoding = json.detect_encoding(data)  # UTF-8, -16 or -32, as JSON allows
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        raise _unparsable(f"the body is not valid {encoding.upper()}: byte 0x{e.object[e.start]:02x} "
                          f"at offset {e.start}") from None
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise _unparsable(f"arrays and objects are nested {depth} deep; the limit is {MAX_DEPTH}")
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as e:  # RecursionError: a backstop, the depth check comes first
        raise _unparsable(str(e)) from None
    if _SURROGATE_ESCAPE.search(text):
        check_strings(value, "")
    return value


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays / objects in JSON text (brackets inside strings do not
    count), without recursion: strings are cut out, the brackets left are summed as +1 / -1
    in linear, C-speed passes (~0.4 s for a 4 MB body of nothing but brackets). Exact for
    valid JSON; in invalid JSON it is exact up to the first error, which is as far as the
    parser gets."""
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    steps = skeleton.encode("ascii").translate(_OPEN_CLOSE)  # "[" -> 2, "]" -> 0
    # depth after the k-th bracket = 2 * opens so far - k
    return max(map(operator.sub, accumulate(steps), count(1)), default=0)


def check_strings(value: object, path: str) -> None:
    """400 naming the first string (or key) that holds a lone UTF-16 surrogate."""
    if isinstance(value, str):
        m = _SURROGATE.search(value)
        if m:
            raise _bad_unicode(path, m.group())
    elif isinstance(value, dict):
        for key, item in value.items():
            m = _SURROGATE.search(key)
            if m:
                raise _bad_unicode(path, m.group(), key=True)
            check_strings(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_strings(item, f"{path}[{i}]")


def _bad_unicode(path: str, char: str, key: bool = False) -> ApiError:
    # paths hold only keys already checked, so the message itself encodes cleanly
    if key:
        where = f"a key of '{path}'" if path else "a key of the body"
    else:
        where = f"'{path}'" if path else "the body"
    return ApiError(400, f"Invalid string in {where}: \\u{ord(char):04x} is a lone UTF-16 surrogate, "
                    "not a character (send valid Unicode; pair surrogates in \\u escapes).",
                    param=path or None, code="invalid_unicode")


def _unparsable(why: str) -> ApiError:
    return ApiError(400, f"We could not parse the JSON body of your request ({why}). The body must be "
                    "a JSON object (Content-Type: application/json).", code="invalid_json")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a 64-bit float")
    return value
