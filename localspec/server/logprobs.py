"""Log-probabilities on the OpenAI endpoints: the request fields and the response shapes.

Chat (`/v1/chat/completions`): `logprobs: true` and `top_logprobs: N` (0..20) give
`choices[0].logprobs.content`, one `{token, logprob, bytes, top_logprobs}` per token, in
every streamed chunk for that chunk's tokens too. Completions (`/v1/completions`): the
legacy `logprobs: N` gives `{tokens, token_logprobs, top_logprobs, text_offset}` (the
chosen token is always among `top_logprobs`, as OpenAI's legacy API and vLLM do), and `echo`
puts the prompt before the answer, with its tokens' log-probabilities when `logprobs` is set
(the first token's is null): `echo` + `logprobs` + `max_tokens: 0` is how log-likelihood
evaluations (lm-eval's `local-completions`) score a model. llama-server's `n_probs: N` asks
for the same with N alternatives.

The numbers are the target's raw distribution (localspec/decode/logprobs.py); the engine
computes them only when asked (GenConfig.logprobs / prompt_logprobs).
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import dataclass

from localspec.config import MAX_TOP_LOGPROBS, GenConfig
from localspec.events import TokenLogprob
from localspec.server.errors import invalid
from localspec.server.fields import get_bool, get_int

CHAT_FIELDS = frozenset({"logprobs", "top_logprobs", "n_probs"})
COMPLETION_FIELDS = frozenset({"logprobs", "echo", "n_probs"})


@dataclass(frozen=True)
class Asked:
    """What a request asked: alternatives per token (None: no log-probabilities) and echo."""

    top: int | None = None
    echo: bool = False


def parse_chat(body: Mapping[str, object]) -> Asked:
    """`logprobs` (a boolean) and `top_logprobs` (0..20, only with `logprobs`), or n_probs."""
    value = body.get("logprobs")
    on = False if value == 0 and not isinstance(value, bool) else get_bool(body, "logprobs", False)
    top = get_int(body, "top_logprobs", lo=0, hi=MAX_TOP_LOGPROBS)
    if top and not on:
        raise invalid("top_logprobs", "Invalid value for 'top_logprobs': 'logprobs' must be true when "
                      "'top_logprobs' is given.")
    return Asked(_with_n_probs(body, (top or 0) if on else None, "top_logprobs"))


def parse_completion(body: Mapping[str, object]) -> Asked:
    """The legacy `logprobs` (an integer 0..20; false / null: off) and `echo`."""
    value = body.get("logprobs")
    top = None if value is None or value is False else get_int(body, "logprobs", lo=0, hi=MAX_TOP_LOGPROBS)
    return Asked(_with_n_probs(body, top, "logprobs"), get_bool(body, "echo", False))


def check_method(cfg: GenConfig) -> None:
    """PARSE keeps a drafted answer the target judged as a whole: no per-token scores."""
    if cfg.method == "parse" and (cfg.logprobs is not None or cfg.prompt_logprobs is not None):
        raise invalid("logprobs", "log-probabilities are not returned by speculative.method 'parse' (the "
                      "target judges a drafted answer, it does not score each token): use another method",
                      code="unsupported_value")


def _with_n_probs(body: Mapping[str, object], top: int | None, name: str) -> int | None:
    """llama-server's `n_probs` (0: off) asks for the same; it must agree with the OpenAI field."""
    n = get_int(body, "n_probs", lo=0, hi=MAX_TOP_LOGPROBS)
    if not n:
        return top
    if top not in (None, n):
        raise invalid("n_probs", f"'n_probs' ({n}) and '{name}' ({top}) disagree: give one of them")
    return n


# --------------------------------------------------------------------------- response shapes
def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def _chat_entry(e: TokenLogprob) -> dict:
    return {"token": _text(e.piece), "logprob": e.logprob, "bytes": list(e.piece),
            "top_logprobs": [{"token": _text(p), "logprob": lp, "bytes": list(p)} for _, p, lp in e.top]}


class LogprobLog:
    """One response's entries, handed out in OpenAI's shape as chunks take them.

    The legacy shape's `text_offset` counts characters of the choice's text before each
    token; a character split across tokens counts at the token that completes it."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.pending: list[TokenLogprob] = []
        self._offset = 0
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, entries: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> None:
        self.pending.extend(entries)

    def take(self) -> dict | None:
        """The shape of the entries added since the last take (None when there are none)."""
        entries, self.pending = self.pending, []
        if not entries:
            return None
        if self.chat:
            return {"content": [_chat_entry(e) for e in entries], "refusal": None}
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for e in entries:
            out["tokens"].append(_text(e.piece))
            out["token_logprobs"].append(e.logprob)
            if e.logprob is None:
                out["top_logprobs"].append(None)
            else:
                top = {_text(p): lp for _, p, lp in e.top}
                top.setdefault(_text(e.piece), e.logprob)
                out["top_logprobs"].append(top)
            out["text_offset"].append(self._offset)
            self._offset += len(self._utf8.decode(e.piece))
        return out

    def empty(self) -> dict:
        """The shape of no entries: a response that asked but has no token (an answer that
        ended at once, at the end-of-turn token, which gets no entry)."""
        if self.chat:
            return {"content": [], "refusal": None}
        return {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}


def echo_text(prompt: object, entries: tuple[TokenLogprob, ...] | None) -> str:
    """The text `echo` puts before the answer: the prompt as sent, or, for token ids, their
    text (the schema asks for the prompt pass then: GenConfig.prompt_logprobs)."""
    if isinstance(prompt, str):
        return prompt
    return b"".join(e.piece for e in entries or ()).decode("utf-8", errors="replace")


class Scores:
    """What one request's handler does with the log-probability items the worker sends
    ("prompt_logprobs", "logprobs"; server/worker.py) and with `echo`."""

    def __init__(self, prompt: object, chat: bool, top: int | None, echo: bool, prompt_pass: bool) -> None:
        self.prompt = prompt
        self.log = LogprobLog(chat) if top is not None else None
        self.echo = echo
        self._echo_text: str | None = prompt if echo and not prompt_pass and isinstance(prompt, str) else None
        self._echo_sent = not echo

    def consume(self, item: tuple) -> bool:
        """Take a log-probability item (True), or leave any other item to the caller (False)."""
        if item[0] == "prompt_logprobs":
            if self.echo:
                self._echo_text = echo_text(self.prompt, item[1])
                if self.log is not None:
                    self.log.add(item[1])
            return True
        if item[0] == "logprobs":
            if self.log is not None:
                self.log.add(item[1])
            return True
        return False

    def echo_now(self) -> str | None:
        """The echoed prompt, once, as soon as it is known (a stream's first text)."""
        if self._echo_sent or self._echo_text is None:
            return None
        self._echo_sent = True
        return self._echo_text

    def take(self) -> dict | None:
        """The entries gathered since the last take, in the endpoint's shape."""
        return self.log.take() if self.log is not None else None

    def whole(self) -> dict | None:
        """A whole response's `logprobs` (None when not asked)."""
        if self.log is None:
            return None
        return self.log.take() or self.log.empty()

    @property
    def prefix(self) -> str:
        """The text before a whole response's answer (the echo)."""
        return self._echo_text or "" if self.echo else ""
