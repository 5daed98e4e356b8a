"""bench fim's holes: cut from Python's own standard library, the way an editor asks.

Why the standard library: real code that nobody here wrote (so nothing was tuned on it),
present wherever the bench runs, public. The cut is deterministic for a seed and an
interpreter: files sorted by name, shuffled by the seed, one function per file; holes come
in three kinds, in turn: `line` (one simple statement), `lines` (2-4 consecutive simple
statements) and `block` (a compound statement -- if / for / while / with / try -- of 2-12
lines). The cursor sits after the first line's indentation (an editor has put it there),
so `n_indent` is that indentation, as llama.vscode sends it. The request is the editor's:
up to PREFIX_LINES before the cursor, SUFFIX_LINES after the hole, and the first
EXTRA_LINES of the two files beside it as `input_extra` chunks. Holes alternate between a
`tune` and a `report` half: whatever is tuned is tuned on `tune`; figures are reported on
`report`.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

KINDS = ("line", "lines", "block")
PREFIX_LINES = 60
SUFFIX_LINES = 30
EXTRA_LINES = 40
MIN_BYTES, MAX_BYTES = 2_000, 200_000
COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.Try)


@dataclass(frozen=True)
class Hole:
    """One completion to ask for, and the middle the file really has."""

    id: str  # file:line:kind
    kind: str
    half: str  # tune | report
    prefix: str
    middle: str
    suffix: str
    extra: tuple[dict, ...]
    n_indent: int

    def body(self, n_predict: int, typed: int = 0) -> dict:
        """The /infill request (llama-server's fields, greedy), with the first `typed`
        characters of the middle typed after the cursor (the editor's later requests)."""
        return {"input_prefix": self.prefix + self.middle[:typed], "input_suffix": self.suffix,
                "input_extra": list(self.extra),
                "n_predict": n_predict, "n_indent": self.n_indent, "temperature": 0, "top_k": 1,
                "cache_prompt": True, "stream": False}

    def exact(self, content: str) -> bool:
        """The answer is the middle (trailing whitespace aside: where the hole ends is a line end)."""
        return content.rstrip() == self.middle.rstrip()

    def to_json(self) -> dict:
        return asdict(self)


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's top-level modules of a useful size, sorted by name."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if MIN_BYTES <= p.stat().st_size <= MAX_BYTES)


def cut_holes(n: int, seed: int = 0, root: Path | None = None) -> list[Hole]:
    """`n` holes (kinds in turn, halves alternating), the same for the same seed and files."""
    files = stdlib_files(root)
    order = list(range(len(files)))
    random.Random(seed).shuffle(order)
    rng = random.Random(seed + 1)
    holes: list[Hole] = []
    for i in order:
        if len(holes) >= n:
            break
        kind = KINDS[len(holes) % len(KINDS)]
        hole = _cut(files, i, kind, rng, "tune" if len(holes) % 2 == 0 else "report")
        if hole is not None:
            holes.append(hole)
    return holes


def _cut(files: list[Path], i: int, kind: str, rng: random.Random, half: str) -> Hole | None:
    try:
        text = files[i].read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (UnicodeDecodeError, SyntaxError, ValueError):
        return None
    spans = [s for f in _functions(tree) for s in _spans(f, kind)]
    if not spans:
        return None
    start, end = rng.choice(spans)  # 1-based, inclusive line numbers
    lines = text.splitlines(keepends=True)
    first = lines[start - 1]
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    before = "".join(lines[max(0, start - 1 - PREFIX_LINES): start - 1])
    middle = first[len(indent):] + "".join(lines[start:end])
    suffix = "".join(lines[end: end + SUFFIX_LINES])
    extra = tuple({"filename": files[j].name, "text": _head(files[j])}
                  for j in (i - 1, i + 1) if 0 <= j < len(files))
    return Hole(f"{files[i].name}:{start}:{kind}", kind, half, before + indent, middle, suffix, extra, len(indent))


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and len(node.body) >= 3:
            yield node


def _simple(stmt: ast.stmt) -> bool:
    """One line, not a docstring, not compound."""
    docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
    return stmt.lineno == stmt.end_lineno and not docstring and not isinstance(stmt, COMPOUND)


def _spans(func: ast.FunctionDef | ast.AsyncFunctionDef, kind: str) -> Iterator[tuple[int, int]]:
    """(first line, last line) of each hole of `kind` in the function's own body."""
    body = func.body
    if kind == "line":
        for s in body:
            if _simple(s):
                yield s.lineno, s.lineno
    elif kind == "lines":
        for a in range(len(body)):
            run = 0
            while a + run < len(body) and _simple(body[a + run]) and run < 4:
                run += 1
            # consecutive statements on consecutive lines (no blank line or comment inside)
            if run >= 2 and body[a + run - 1].lineno - body[a].lineno == run - 1:
                yield body[a].lineno, body[a + run - 1].lineno
    else:
        for s in body:
            end = s.end_lineno or s.lineno
            if isinstance(s, COMPOUND) and 2 <= end - s.lineno + 1 <= 12:
                yield s.lineno, end


def _head(path: Path) -> str:
    try:
        return "".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:EXTRA_LINES])
    except UnicodeDecodeError:
        return ""
