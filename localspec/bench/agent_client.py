"""The client side of `localspec bench agent`: one streamed tool-calling request, and the
check of the calls it returned.

Standard library only (http.client), as the serve bench: what is timed is the server. The
stream is assembled the way OpenAI's SDK does it: `delta.tool_calls[i]` pieces keyed by
`index`, `function.arguments` concatenated.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field


@dataclass
class Step:
    """One request of a session: the history before an assistant message, and that message."""

    session: str
    index: int
    messages: list[dict]
    tools: list[dict]
    expected: dict

    @property
    def expected_tool(self) -> str | None:
        calls = self.expected.get("tool_calls") or []
        return calls[0]["function"]["name"] if calls else None

    @property
    def expected_arguments(self) -> dict | None:
        calls = self.expected.get("tool_calls") or []
        return json.loads(calls[0]["function"]["arguments"]) if calls else None


@dataclass
class Call:
    name: str
    arguments: str
    valid: bool = False
    why: str = ""


@dataclass
class StepResult:
    step: Step
    ttft: float = 0.0
    latency: float = 0.0
    tokens: int = 0
    content: str = ""
    calls: list[Call] = field(default_factory=list)
    finish: str = ""
    error: str = ""

    def called(self, name: str | None) -> bool:
        return any(c.name == name for c in self.calls)

    @property
    def exact(self) -> bool:
        """The first call is the ideal trace's, arguments equal as JSON."""
        want = self.step.expected_arguments
        if not self.calls or want is None or self.calls[0].name != self.step.expected_tool:
            return False
        try:
            return json.loads(self.calls[0].arguments) == want
        except ValueError:
            return False


def stream_step(port: int, step: Step, n_predict: int, timeout: float = 900) -> StepResult:
    """Send `step` streamed, greedy; never raises (an error is recorded on the result)."""
    res = StepResult(step)
    body = json.dumps({"model": "bench", "messages": step.messages, "tools": step.tools, "tool_choice": "auto",
                       "stream": True, "max_tokens": n_predict, "temperature": 0,
                       "stream_options": {"include_usage": True}})
    pieces: dict[int, dict] = {}
    t0 = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            res.error = f"HTTP {resp.status}: {resp.read()[:300].decode(errors='replace')}"
            return res
        for raw in resp:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                res.error = f"stream error: {chunk['error']}"
                break
            if chunk.get("usage"):
                res.tokens = int(chunk["usage"].get("completion_tokens") or 0)
            for ch in chunk.get("choices") or []:
                delta = ch.get("delta") or {}
                if (delta.get("content") or delta.get("tool_calls")) and not res.ttft:
                    res.ttft = time.perf_counter() - t0
                res.content += delta.get("content") or ""
                for tc in delta.get("tool_calls") or []:
                    p = pieces.setdefault(int(tc.get("index", 0)), {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    p["name"] += fn.get("name") or ""
                    p["arguments"] += fn.get("arguments") or ""
                res.finish = ch.get("finish_reason") or res.finish
        conn.close()
    except (OSError, ValueError, http.client.HTTPException) as e:
        res.error = f"{type(e).__name__}: {e}"
    res.latency = time.perf_counter() - t0
    res.calls = [Call(p["name"], p["arguments"]) for _, p in sorted(pieces.items())]
    return res


def check_calls(res: StepResult) -> None:
    """Mark each call valid when it names a declared tool and its arguments parse as JSON
    and validate against that tool's parameters schema (jsonschema, when installed; without
    it, parsing and the required keys are checked)."""
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in res.step.tools}
    for c in res.calls:
        if c.name not in schemas:
            c.why = f"unknown tool {c.name!r}"
            continue
        try:
            args = json.loads(c.arguments)
        except ValueError as e:
            c.why = f"arguments are not JSON: {e}"
            continue
        c.why = _schema_error(args, schemas[c.name])
        c.valid = not c.why


def _schema_error(value: object, schema: dict) -> str:
    try:
        import jsonschema
    except ImportError:
        if not isinstance(value, dict):
            return "arguments are not an object"
        missing = [k for k in schema.get("required", []) if k not in value]
        return f"missing {missing}" if missing else ""
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        return e.message
    return ""
