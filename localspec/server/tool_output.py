"""Tool calling on /v1/chat/completions, answer side: the model's text -> OpenAI `tool_calls`.

Non-streamed (`apply`): the answer is parsed once (toolcall.parse_calls); with calls,
`message.tool_calls` holds them (ids `call_<random>`, `function.arguments` a JSON string),
`content` the text outside them or null, `finish_reason` "tool_calls" (legacy `functions`
requests: `message.function_call`, "function_call").

Streamed (`ToolStream`): text goes out as `delta.content` until a call's opening marker
(or a tail that may become one) appears; from there the answer is held, and each call goes
out as soon as its closing marker is written, as OpenAI's deltas: one chunk with the call's
`index`, `id`, `type` and `function.name` (arguments ""), then one with its whole
`function.arguments` (not piece by piece as they are generated: the call is complete, and
schema-checked by its grammar, before any of it goes out). What is held and is not a call (a malformed one) goes out as content
at the end: the stream and the non-streamed answer say the same thing.
"""

from __future__ import annotations

from localspec.server.schema import GenRequest
from localspec.server.stream import Shapes
from localspec.toolcall import Call, Parsed, parse_calls
from localspec.toolcall.formats import content_end


def _parse(req: GenRequest, text: str) -> Parsed:
    tr, fmt = req.tools, req.tool_format
    assert tr is not None and fmt is not None
    return parse_calls(text, fmt, tr.selected(), parallel=tr.parallel)


def apply(body: dict, req: GenRequest) -> None:
    """Rewrite a whole chat response's message with the calls its content holds."""
    choice = body["choices"][0]
    msg = choice["message"]
    parsed = _parse(req, msg.get("content") or "")
    if not parsed.calls:
        return
    msg["content"] = parsed.content
    assert req.tools is not None
    if req.tools.legacy:
        call = parsed.calls[0]
        msg["function_call"] = {"name": call.name, "arguments": call.arguments}
        choice["finish_reason"] = "function_call"
    else:
        msg["tool_calls"] = [c.to_openai() for c in parsed.calls]
        choice["finish_reason"] = "tool_calls"


class ToolStream:
    """One streamed answer's content / tool-call split (module docstring)."""

    def __init__(self, req: GenRequest) -> None:
        self.req = req
        self.text = ""  # the answer so far
        self.shown = 0  # characters of it sent as content
        self.sent = 0  # calls sent
        self.closed = 0  # end of the last call block that was parsed into sent calls

    # ------------------------------------------------------------------ chunks
    def delta(self, shapes: Shapes, segments: list[dict]) -> list[dict]:
        """The chunks for these provenance segments (the answer's text is filtered)."""
        answer = "".join(s["text"] for s in segments if s.get("segment", "answer") == "answer")
        content, calls = self._feed(answer)
        chunk = shapes.delta(segments)
        d = chunk["choices"][0]["delta"]
        out = []
        if "content" in d:
            if content:
                d["content"] = content
            else:
                d.pop("content")
        if d:
            out.append(chunk)
        return out + [ch for c in calls for ch in self._call_chunks(shapes, c)]

    def final(self, shapes: Shapes, chunks: list[dict]) -> list[dict]:
        """What is still held, then the finish chunks (finish_reason "tool_calls" when calls went out)."""
        content, calls = self._finish()
        out = []
        if content:
            out.append(self._bare(shapes, {"content": content}))
        out += [ch for c in calls for ch in self._call_chunks(shapes, c)]
        if self.sent:
            legacy = self.req.tools is not None and self.req.tools.legacy
            for ch in chunks:
                for choice in ch["choices"]:
                    if choice.get("finish_reason") == "stop":
                        choice["finish_reason"] = "function_call" if legacy else "tool_calls"
        return out + chunks

    def _bare(self, shapes: Shapes, delta: dict) -> dict:
        chunk = shapes.delta([])
        chunk.pop("localspec", None)
        chunk["choices"][0]["delta"] = delta
        return chunk

    def _call_chunks(self, shapes: Shapes, call: tuple[int, Call]) -> list[dict]:
        """OpenAI's deltas for one call: its head (index, id, type, name, arguments ""),
        then its arguments (clients concatenate the pieces)."""
        index, c = call
        if self.req.tools is not None and self.req.tools.legacy:
            return [self._bare(shapes, {"function_call": {"name": c.name, "arguments": ""}}),
                    self._bare(shapes, {"function_call": {"arguments": c.arguments}})]
        head = {"index": index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
        return [self._bare(shapes, {"tool_calls": [head]}),
                self._bare(shapes, {"tool_calls": [{"index": index, "function": {"arguments": c.arguments}}]})]

    # ------------------------------------------------------------------ text
    def _feed(self, piece: str) -> tuple[str, list[tuple[int, Call]]]:
        self.text += piece
        fmt = self.req.tool_format
        assert fmt is not None
        if not self.sent:  # before the first call: content up to a (possible) marker
            end = content_end(self.text, fmt)
            if end > self.shown:
                out = self.text[self.shown : end]
                self.shown = end
                return out, self._complete_calls()
        return "", self._complete_calls()

    def _complete_calls(self) -> list[tuple[int, Call]]:
        """Calls whose closing marker has been written since the last ones went out."""
        fmt = self.req.tool_format
        assert fmt is not None
        if not fmt.close:
            return []
        cut = self.text.rfind(fmt.close)
        if cut < 0 or cut + len(fmt.close) <= self.closed:
            return []
        cut += len(fmt.close)
        parsed = _parse(self.req, self.text[self.shown : cut])
        if len(parsed.calls) <= self.sent or parsed.content:  # text between calls: wait for the end
            return []
        self.closed = cut
        return self._take(parsed.calls)

    def _take(self, calls: list[Call]) -> list[tuple[int, Call]]:
        assert self.req.tools is not None
        room = len(calls) if self.req.tools.parallel else min(len(calls), 1)
        new = [(i, calls[i]) for i in range(self.sent, room)]
        self.sent = max(self.sent, room)
        return new

    def _finish(self) -> tuple[str, list[tuple[int, Call]]]:
        held = self.text[self.shown :]
        if not held:
            return "", []
        parsed = _parse(self.req, held)
        if len(parsed.calls) < self.sent:  # cannot happen: the text only grew
            return "", []
        calls = self._take(parsed.calls)
        if self.sent:
            return parsed.content or "", calls
        return held, calls
