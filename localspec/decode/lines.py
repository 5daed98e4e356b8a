"""llama-server's line rules for code completion: where the hole ends, and a time limit.

An editor's completion should end where the code it fills in ends, not run on into the
next function: llama-server's `n_indent` ends the answer at the first new line (after the
first line, which continues the cursor's) indented by fewer than `n_indent` spaces or tabs
(a blank line counts as indentation 0), cutting that line's text and keeping its
indentation; `t_max_predict_ms` ends it at a new line once generating has taken longer than
that (the whole piece holding the newline kept), so a slow completion still ends on a
whole line. `max_lines` (localspec's) caps the answer at that many lines, the last newline
dropped. The rules read the visible text (after stop strings), character by character, as
llama-server's `process_token` does; the Emitter applies them (decode/emitter.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

Clock = Callable[[], float]


@dataclass
class LineRules:
    """One turn's line rules and what they have seen (`note` says which one ended the turn)."""

    n_indent: int = 0
    max_lines: int = 0
    t_max_predict_ms: float = 0.0
    clock: Clock = time.perf_counter
    t0: float = field(default=0.0)
    note: str = ""
    _lines: int = 0
    _line_start: int | None = None  # where the line being written starts (after a newline)
    _checked: bool = True  # its indentation is known
    _seen: int = 0  # characters fed so far

    def __post_init__(self) -> None:
        self.t0 = self.t0 or self.clock()

    @property
    def active(self) -> bool:
        return self.n_indent > 0 or self.max_lines > 0 or self.t_max_predict_ms > 0

    def feed(self, piece: str) -> tuple[str, bool]:
        """(what of `piece` stays visible, whether a rule ended the answer here)."""
        base = self._seen
        self._seen += len(piece)
        for i, ch in enumerate(piece):
            pos = base + i
            if not self._checked and ch not in " \t":
                self._checked = True
                assert self._line_start is not None
                if pos - self._line_start < self.n_indent:
                    self.note = f"a line indented by fewer than n_indent={self.n_indent} characters"
                    return piece[:i], True
            if ch == "\n":
                self._lines += 1
                if self.max_lines and self._lines >= self.max_lines:
                    self.note = f"max_lines={self.max_lines}"
                    return piece[:i], True
                self._line_start, self._checked = pos + 1, self.n_indent <= 0
        if "\n" in piece and self.t_max_predict_ms > 0 and (self.clock() - self.t0) * 1e3 > self.t_max_predict_ms:
            self.note = f"t_max_predict_ms={self.t_max_predict_ms:g} passed at a new line"
            return piece, True
        return piece, False
