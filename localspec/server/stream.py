"""Response bodies and SSE chunks in OpenAI's shapes, plus localspec's own fields.

Every response (the last chunk when streaming) carries llama-server's `timings`, so tools
that read llama-server's speed figures read ours, and a `localspec` object that says what
speculation did. With `localspec.provenance` asked for, each chunk also lists who wrote its
characters: segments `{"kind", "text", "tokens"}` whose texts concatenate to exactly the
chunk's text, kind one of draft (drafted and accepted), correction, bonus, target.

A thinking model's chat answers (server/thinking.py) carry the reasoning apart, as
llama-server's `--reasoning-format deepseek` does: `message.reasoning_content` /
`delta.reasoning_content`, `content` the answer alone; provenance segments then also say
their `segment` ("reasoning" or "answer": each kind's texts concatenate to that field) and
the budget's forced close is kind "forced".
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from localspec.events import Done, Stats
from localspec.server.prediction import prediction_usage
from localspec.server.schema import GenRequest

FINISH = {"eog": "stop", "stop": "stop", "max_tokens": "length", "context_full": "length", "interrupted": "stop",
          "limit": "length"}

DONE_LINE = "data: [DONE]\n\n"


def sse(obj: dict) -> str:
    """One server-sent event carrying a JSON object."""
    return "data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n\n"


def timings(st: Stats, queue_seconds: float) -> dict:
    """llama-server's `timings` names; prompt_n counts evaluated tokens, cache_n reused ones."""
    prompt_n = st.prompt_evaluated
    prompt_ms = st.prompt_seconds * 1e3
    predicted_ms = st.seconds * 1e3
    return {
        "cache_n": max(0, st.prompt_tokens - st.prompt_evaluated),
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / st.prompt_seconds if st.prompt_seconds > 0 and prompt_n else 0.0,
        "predicted_n": st.n_tokens,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / st.n_tokens if st.n_tokens else 0.0,
        "predicted_per_second": st.tok_per_s,
        "draft_n": st.drafted,
        "draft_n_accepted": sum(st.accepted_lengths),
        "queue_ms": queue_seconds * 1e3,
        "timing_wait_ms": st.timing_seconds * 1e3,  # waited for the cost model's timing step in flight
    }


def usage(st: Stats) -> dict:
    out = {
        "prompt_tokens": st.prompt_tokens,
        "completion_tokens": st.n_tokens,
        "total_tokens": st.prompt_tokens + st.n_tokens,
        "prompt_tokens_details": {"cached_tokens": max(0, st.prompt_tokens - st.prompt_evaluated)},
    }
    predicted = prediction_usage(st)
    if predicted is not None:
        out["completion_tokens_details"] = predicted
    return out


def localspec_info(done: Done, req: GenRequest, queue_seconds: float, draft: str | None) -> dict:
    """What ran and how well speculation went (the `localspec` object of a response)."""
    st = done.stats
    info = {
        "method": st.method,
        "ran": st.ran or st.method,
        "K": st.K,
        "L": st.L,
        "draft": draft,
        "block_efficiency": st.block_efficiency,
        "accepted_histogram": st.histogram() if st.accepted_lengths else [],
        "verify_steps": len(st.accepted_lengths),
        "target_calls": st.target_calls,
        "iterations": st.iterations,
        "stop_reason": done.reason,
        "queue_ms": queue_seconds * 1e3,
    }
    if done.stop_word:  # which stop string ended the answer (llama-server's stopping_word)
        info["stop_word"] = done.stop_word
    if st.choice_note:  # why auto ran what it ran (e.g. the cost model still timing)
        info["choice_note"] = st.choice_note
    if done.message:
        info["message"] = done.message
    if req.ignored:
        info["ignored"] = list(req.ignored)
    return info


def add_segment(segments: list[dict], kind: str, text: str, tokens: int, segment: str | None = None,
                proposer: str | None = None) -> None:
    """Append provenance, merging with the previous segment of the same kind (and segment,
    and for draft text the same proposer: "draft" the draft model, "ngram"/"suffix" a lookup)."""
    last = segments[-1] if segments else None
    if last and last["kind"] == kind and last.get("segment") == segment and last.get("proposer") == proposer:
        last["text"] += text
        last["tokens"] += tokens
    elif text or tokens:
        seg = {"kind": kind, "text": text, "tokens": tokens}
        if segment is not None:
            seg["segment"] = segment
        if proposer is not None:
            seg["proposer"] = proposer
        segments.append(seg)


def trim_tokens(segments: list[dict], n_tokens: int) -> None:
    """Make provenance count the tokens usage counts (`Stats.n_tokens`, the answer's).

    The decoding loops report the end-of-turn token in the event that sampled it (the
    target's last Written token, which adds no text), while usage counts only the tokens
    of the answer; the excess comes off the last segments. Tokens a thinking budget forced
    (kind "forced") are not generated, so usage never counts them and they stay as they are."""
    excess = sum(s["tokens"] for s in segments if s["kind"] != "forced") - n_tokens
    for seg in reversed(segments):
        if excess <= 0:
            break
        if seg["kind"] != "forced":
            cut = min(excess, seg["tokens"])
            seg["tokens"] -= cut
            excess -= cut
    segments[:] = [s for s in segments if s["text"] or s["tokens"]]  # the end-of-turn's own, now empty


def _texts(segments: list[dict]) -> tuple[str, str]:
    """(answer text, reasoning text) of provenance segments."""
    answer = "".join(s["text"] for s in segments if s.get("segment", "answer") == "answer")
    return answer, "".join(s["text"] for s in segments if s.get("segment") == "reasoning")


@dataclass
class Shapes:
    """Builds the bodies of one request (ids and timestamps shared by all its chunks)."""

    req: GenRequest
    model: str
    draft: str | None = None
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            prefix = "chatcmpl-" if self.req.kind == "chat" else "cmpl-"
            self.id = prefix + uuid.uuid4().hex[:24]

    @property
    def _chat(self) -> bool:
        return self.req.kind == "chat"

    def _head(self, chunk: bool) -> dict:
        if self._chat:
            obj = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": "localspec"}

    def _extras(self, done: Done, queue_seconds: float, segments: list[dict] | None) -> dict:
        info = localspec_info(done, self.req, queue_seconds, self.draft)
        if segments is not None:
            info["provenance"] = segments
        return {"timings": timings(done.stats, queue_seconds), "localspec": info}

    # ------------------------------------------------------------------ whole responses
    def response(self, done: Done, queue_seconds: float, segments: list[dict],
                 split: tuple[str, str] | None = None, logprobs: dict | None = None, echo: str = "") -> dict:
        """The whole answer; `split` = (reasoning, answer) of a thinking model's chat answer;
        `logprobs` and `echo` (the prompt's text before a completion) from server/logprobs.py."""
        finish = FINISH.get(done.reason, "stop")
        if self._chat:
            message = {"role": "assistant", "content": done.text if split is None else split[1], "refusal": None}
            if split is not None and split[0]:
                message["reasoning_content"] = split[0]
            choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": echo + done.text, "logprobs": logprobs, "finish_reason": finish}
        body = self._head(chunk=False)
        body["choices"] = [choice]
        body["usage"] = usage(done.stats)
        body.update(self._extras(done, queue_seconds, segments if self.req.provenance else None))
        return body

    # ------------------------------------------------------------------ stream chunks
    def _chunk(self, choice: dict | None) -> dict:
        body = self._head(chunk=True)
        body["choices"] = [choice] if choice is not None else []
        if self.req.include_usage:
            body["usage"] = None
        return body

    def _choice(self, text: str | None, finish: str | None, role: bool = False, reasoning: str = "",
                logprobs: dict | None = None) -> dict:
        if self._chat:
            delta: dict = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
            if reasoning:  # llama-server sends only the fields that grew
                delta["reasoning_content"] = reasoning
                if not text:
                    delta.pop("content", None)
            return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}

    def first(self) -> dict | None:
        """Chat streams open with the assistant role (as OpenAI's do); completions do not."""
        return self._chunk(self._choice(None, None, role=True)) if self._chat else None

    def delta(self, segments: list[dict], logprobs: dict | None = None) -> dict:
        text, reasoning = _texts(segments)
        body = self._chunk(self._choice(text, None, reasoning=reasoning, logprobs=logprobs))
        if self.req.provenance:
            body["localspec"] = {"provenance": segments}
        return body

    def text_chunk(self, text: str, logprobs: dict | None) -> dict:
        """A chunk of text that no decoding event wrote: a completion's echoed prompt."""
        return self._chunk(self._choice(text, None, logprobs=logprobs))

    def final(self, done: Done, queue_seconds: float, logprobs: dict | None = None) -> list[dict]:
        """The finish_reason chunk (with the log-probabilities of tokens that added no text),
        then the usage chunk if asked; the last carries the extras."""
        chunks = [self._chunk(self._choice(None, FINISH.get(done.reason, "stop"), logprobs=logprobs))]
        if self.req.include_usage:
            last = self._chunk(None)
            last["usage"] = usage(done.stats)
            chunks.append(last)
        extras = self._extras(done, queue_seconds, None)
        chunks[-1].update(extras)
        return chunks
