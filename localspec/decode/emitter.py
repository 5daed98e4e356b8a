"""Turns committed tokens into visible text: EOG, token budget, stop strings, line rules, UTF-8.

Shared by every loop so AR, speculative and PARSE stop in exactly the same places and the
same text reaches the user.
"""

from __future__ import annotations

from localspec.backend import Detokenizer, Model
from localspec.decode.lines import LineRules


class Emitter:
    """Accumulates the visible answer of one turn."""

    def __init__(self, model: Model, n_predict: int, stop: list[str] | None = None,
                 lines: LineRules | None = None) -> None:
        self.model = model
        self.lines = lines if lines is not None and lines.active else None  # "limit": lines.note says which
        self.n_predict = n_predict
        self.stop = [s for s in (stop or []) if s]
        self.detok = Detokenizer(model)
        self.tokens: list[int] = []
        self.text = ""
        self._held = ""
        self.done: str | None = None
        self.stop_word = ""  # the stop string that ended the turn (Anthropic's stop_sequence)

    @property
    def remaining(self) -> int:
        return self.n_predict - len(self.tokens)

    def push(self, tokens: list[int] | tuple[int, ...]) -> tuple[int, str]:
        """Commit tokens in order until one ends the turn.

        Returns (how many of `tokens` were taken, text added to the visible answer). Once
        `done` is set (eog / max_tokens / stop) later pushes take nothing.
        """
        taken = 0
        out: list[str] = []
        for tok in tokens:
            if self.done:
                break
            if self.model.is_eog(tok):
                self.done = "eog"
                break
            self.tokens.append(tok)
            taken += 1
            piece = self._visible(self.detok.push([tok]))
            if self.lines is not None and piece:
                piece, ended = self.lines.feed(piece)
                if ended:
                    self.done = "limit"
                    self._held = ""
            out.append(piece)
            if self.done is None and len(self.tokens) >= self.n_predict:
                self.done = "max_tokens"
        if self.done in ("eog", "max_tokens"):
            out.append(self.finish())
        delta = "".join(out)
        self.text += delta
        return taken, delta

    def _visible(self, piece: str) -> str:
        """Apply stop strings: withhold text that may still become a stop string."""
        if not self.stop:
            return piece
        buf = self._held + piece
        for s in self.stop:
            i = buf.find(s)
            if i >= 0:
                self.done = "stop"
                self.stop_word = s
                self._held = ""
                return buf[:i]
        hold = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(buf)), 0, -1):
                if buf.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        self._held = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold]

    def finish(self) -> str:
        """Release withheld text at the end of the turn (not after a stop string)."""
        if self.done in ("stop", "limit"):
            return ""
        rest = self._held + self.detok.flush()
        self._held = ""
        return rest

    def close(self, reason: str) -> str:
        """End the turn for a reason found outside push (interrupt, context full)."""
        if self.done is None:
            self.done = reason
            tail = self.finish()
            self.text += tail
            return tail
        return ""
