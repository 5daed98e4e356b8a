"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}`.

Every failure a client can see goes through `ApiError`, so the status code, the `type` and
the `code` strings are decided in one place and match what OpenAI's own API sends for the
same mistake (the SDKs map the status code to an exception class; UIs show `message`).
"""

from __future__ import annotations

from starlette.responses import JSONResponse


class ApiError(Exception):
    """A request the server answers with an error body instead of a completion."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(param: str, message: str, code: str = "invalid_value") -> ApiError:
    """400 for a field with a wrong type or an out-of-range value."""
    return ApiError(400, message, param=param, code=code)


def wrong_type(param: str, expected: str, value: object) -> ApiError:
    """400 in OpenAI's words: "Invalid type for 'x': expected an integer, but got a string"."""
    got = _json_type(value)
    return ApiError(400, f"Invalid type for '{param}': expected {expected}, but got {got} instead.",
                    param=param, code="invalid_type")


def unsupported(param: str, why: str) -> ApiError:
    """400 for a field localspec understands but does not build (it would change the answer)."""
    return ApiError(400, f"'{param}' is not supported by localspec serve: {why}", param=param,
                    code="unsupported_parameter")


def unknown(param: str) -> ApiError:
    """400 for a field localspec does not know: it might change the answer, so it is not ignored."""
    return ApiError(
        400,
        f"Unrecognized request argument supplied: '{param}' (localspec serve rejects fields it does "
        "not know instead of ignoring them; start it with --ignore-unknown-fields to accept them)",
        param=param,
        code="unknown_parameter",
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
