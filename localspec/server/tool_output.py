"""Tool calling on /v1/chat/completions, answer side: the model's text -> OpenAI `tool_calls`.

Non-streamed (`apply`): the answer is parsed once (toolcall.parse_calls); with calls,
`message.tool_calls` holds them (ids `call_<random>`, `function.arguments` a JSON string),
`content` the text outside them or null, `finish_reason` "tool_calls" (legacy `functions`
requests: `message.function_call`, "function_call").

Streamed (`ToolStream`): text goes out as `delta.content` until a call's opening marker
(or a tail that may become one) appears; from there the answer is held, and each call goes
out as OpenAI's deltas: one chunk with the call's `index`, `id`, `type` and
`function.name` (arguments ""), then its `function.arguments` in pieces. Hermes / Qwen
calls stream: the head as soon as the name is written, the arguments as they are generated
(the grammar holds them to the schema, so the pieces concatenate to the model's JSON
object), and so does a small model's untagged call (`{"name": ...` as the whole answer); other formats go out whole once the call's closing marker (or the answer's end)
shows it complete. What is held and is not a call (a malformed one) goes out as content
at the end: the stream and the non-streamed answer say the same thing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([A-Za-z0-9_.\-]{1,64})"\s*,\s*"arguments"\s*:\s*(?=\{)')


@dataclass
class _Live:
    """A Hermes call whose arguments are going out as they are written."""

    index: int
    start: int  # where its arguments' text starts in the answer
    bare: bool = False  # an untagged call that is the whole answer: it ends with the answer
    sent: int = 0  # characters of the arguments sent


class ToolStream:
    """One streamed answer's content / tool-call split (module docstring)."""

    def __init__(self, req: GenRequest) -> None:
        assert req.tools is not None and req.tool_format is not None
        self.req = req
        self.tools = req.tools
        self.fmt = req.tool_format
        self.names = {t["function"]["name"] for t in self.tools.selected()}
        self.text = ""  # the answer so far
        self.shown = 0  # characters of it sent as content
        self.sent = 0  # calls whose head went out
        self.closed = 0  # the end of the last call that went out whole
        self.live: _Live | None = None

    # ------------------------------------------------------------------ chunks
    def delta(self, shapes: Shapes, segments: list[dict], logprobs: dict | None = None) -> list[dict]:
        """The chunks for these provenance segments (the answer's text is filtered)."""
        answer = "".join(s["text"] for s in segments if s.get("segment", "answer") == "answer")
        content, deltas = self._feed(answer)
        chunk = shapes.delta(segments, logprobs)
        d = chunk["choices"][0]["delta"]
        out = []
        if "content" in d:
            if content:
                d["content"] = content
            else:
                d.pop("content")
        if d:
            out.append(chunk)
        return out + [self._bare(shapes, x) for x in deltas]

    def final(self, shapes: Shapes, chunks: list[dict]) -> list[dict]:
        """What is still held, then the finish chunks (finish_reason "tool_calls" when calls went out)."""
        content, deltas = self._finish()
        out = [self._bare(shapes, {"content": content})] if content else []
        out += [self._bare(shapes, x) for x in deltas]
        if self.sent:
            for ch in chunks:
                for choice in ch["choices"]:
                    if choice.get("finish_reason") == "stop":
                        choice["finish_reason"] = "function_call" if self.tools.legacy else "tool_calls"
        return out + chunks

    def _bare(self, shapes: Shapes, delta: dict) -> dict:
        chunk = shapes.delta([])
        chunk.pop("localspec", None)
        chunk["choices"][0]["delta"] = delta
        return chunk

    # ------------------------------------------------------------------ deltas
    def _head(self, index: int, name: str, call_id: str) -> dict:
        if self.tools.legacy:
            return {"function_call": {"name": name, "arguments": ""}}
        return {"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                "function": {"name": name, "arguments": ""}}]}

    def _args(self, index: int, piece: str) -> dict:
        if self.tools.legacy:
            return {"function_call": {"arguments": piece}}
        return {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}

    def _whole(self, calls: list[tuple[int, Call]]) -> list[dict]:
        """OpenAI's deltas for whole calls: each one's head, then its arguments."""
        return [d for i, c in calls for d in (self._head(i, c.name, c.id), self._args(i, c.arguments))]

    # ------------------------------------------------------------------ text
    def _feed(self, piece: str) -> tuple[str, list[dict]]:
        self.text += piece
        out = ""
        if not self.sent:  # before the first call: content up to a (possible) marker
            end = content_end(self.text, self.fmt)
            if end > self.shown:
                out = self.text[self.shown : end]
                self.shown = end
        if self.fmt.streams_args:
            return out, self._stream_args(final=False)
        return out, self._whole(self._complete_calls())

    def _stream_args(self, final: bool) -> list[dict]:
        """Hermes: each call's head as soon as its name is written, then its arguments as
        they grow (held back from their last `}`, which may close the call's object); the
        rest once the closing marker (or, `final`, the end) shows where they end. An answer
        that starts as an untagged call of a declared tool streams the same way, ending with
        the answer (what the model writes after such a call's object would make it text when
        not streamed: streamed, the call stands, as a call cut short does)."""
        out: list[dict] = []
        while True:
            if self.live is None:
                at = self.text.find(self.fmt.open, max(self.closed, self.shown))
                m = _HEAD.match(self.text, at + len(self.fmt.open)) if at >= 0 else None
                bare = m is None and not self.sent and self.shown == 0
                if bare:  # a small model's untagged call (Qwen2.5-Coder's): the answer is the call
                    m = _HEAD.match(self.text)
                if m is None or m.group(1) not in self.names or (self.sent and not self.tools.parallel):
                    return out
                self.live = _Live(self.sent, m.end(), bare)
                self.sent += 1
                out.append(self._head(self.live.index, m.group(1), self.fmt.new_id()))
            live = self.live
            close = -1 if live.bare else self.text.find(self.fmt.close, live.start)
            if close < 0 and not final:
                raw = self.text[live.start :]
                upto = raw.rfind("}")  # from the last "}" on, it may be the call object's end
                upto = len(raw) if upto < 0 else upto
                if upto > live.sent:
                    out.append(self._args(live.index, raw[live.sent : upto]))
                    live.sent = upto
                return out
            end = len(self.text) if close < 0 else close
            body = self.text[live.start : end].rstrip()
            args = body[:-1].rstrip() if body.endswith("}") else body
            if len(args) > live.sent:
                out.append(self._args(live.index, args[live.sent :]))
            self.closed = end + (len(self.fmt.close) if close >= 0 else 0)
            self.live = None
            if close < 0:
                return out

    def _complete_calls(self) -> list[tuple[int, Call]]:
        """Calls whose closing marker has been written since the last ones went out
        (formats whose arguments are not streamed piece by piece)."""
        if not self.fmt.close:
            return []
        cut = self.text.rfind(self.fmt.close)
        if cut < 0 or cut + len(self.fmt.close) <= self.closed:
            return []
        cut += len(self.fmt.close)
        parsed = _parse(self.req, self.text[self.shown : cut])
        if len(parsed.calls) <= self.sent or parsed.content:  # text between calls: wait for the end
            return []
        self.closed = cut
        return self._take(parsed.calls)

    def _take(self, calls: list[Call]) -> list[tuple[int, Call]]:
        room = len(calls) if self.tools.parallel else min(len(calls), 1)
        new = [(i, calls[i]) for i in range(self.sent, room)]
        self.sent = max(self.sent, room)
        return new

    def _finish(self) -> tuple[str, list[dict]]:
        deltas = self._stream_args(final=True) if self.fmt.streams_args else []
        held = self.text[self.shown :]
        if not held:
            return "", deltas
        parsed = _parse(self.req, held)
        deltas += self._whole(self._take(parsed.calls))
        if len(parsed.calls) < self.sent:  # a streamed call cut short (max_tokens): it is what was held
            return "", deltas
        if self.sent:
            return parsed.content or "", deltas
        return held, deltas
