"""llama.cpp's speculative loop timed over the tokens localspec's figure covers.

`llama-speculative-simple -n 128` stops only after the pass that crosses 128, and its
n-gram settings draft their own lengths (ngram-mod 48-64 tokens, ngram-simple up to 48,
whatever `--spec-draft-n-max` says): on the edit prompts its runs made 154-193 tokens, and
its "decoded ... t/s" covered them all, where localspec's tok/s covers 128. The tokens past
128 were the fastest of the answer (one 64-token pass of a copy), so every "auto vs
llama.cpp" ratio on the edit sets compared 128 tokens against up to 193 (stops 45-55).

With `-lv 5` the tool logs one timestamped line per pass ("accepted 35/35 draft tokens",
each pass adds accepted + 1 tokens); with the decode loop's length (its "decoded" line, which
peer.parse_speculative_output reads) this module
rebuilds the loop's timeline and reads the speed at the pass that reaches n tokens, as
localspec counts its own (its last pass is cut at n and paid whole). The debug level adds
two log lines per pass to the loop (the logger writes them from its own thread).
"""

from __future__ import annotations

import re

LOG_ARGS = ("-lv", "5", "--log-timestamps")  # the per-pass lines, with their times

# '0.31.254.792 D accepted 64/64 draft tokens': minutes.seconds.milliseconds.microseconds
_TS = r"(\d+)\.(\d+)\.(\d+)\.(\d+)"
_PASS = re.compile(_TS + r" D accepted (\d+)/(\d+) draft tokens")


def _seconds(m: re.Match[str]) -> float:
    minutes, secs, ms, us = (int(m.group(i)) for i in range(1, 5))
    return minutes * 60 + secs + ms / 1e3 + us / 1e6


def timeline(output: str, loop_seconds: float) -> list[tuple[int, float]]:
    """(tokens so far, seconds since the decode loop began) after each pass, the loop being
    `loop_seconds` long (the tool's "decoded ... in S seconds"); [] when the output has no
    per-pass lines (a tool run without LOG_ARGS, or another format)."""
    passes = list(_PASS.finditer(output))
    if not passes:
        return []
    # the loop ends right after its last pass is logged (a few token prints, one seq_rm)
    start = _seconds(passes[-1]) - loop_seconds
    out, n = [], 0
    for m in passes:
        n += int(m.group(5)) + 1  # the accepted drafts and the target's own token
        out.append((n, max(_seconds(m) - start, 0.0)))
    return out


def speed_at(points: list[tuple[int, float]], n: int) -> tuple[int, float] | None:
    """(tokens, seconds) at the first pass that reaches n tokens, counted as n; None when
    the run never reached n (an end of answer first: its own figure stands)."""
    for tokens, seconds in points:
        if tokens >= n:
            return n, seconds
    return None
