"""The package's import graph has no circle, and the rooms keep their walls.

Walks every module's imports (module level and inside functions alike, since a lazy
import is still a dependency) and fails on any strongly connected component of size > 1.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "localspec"


def _modules() -> dict[str, Path]:
    mods = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


def _graph() -> dict[str, set[str]]:
    mods = _modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        base = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mod = ".".join(base[: len(base) - node.level + 1] + [node.module or ""]) if node.level else node.module or ""
                mod = mod.rstrip(".")
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                r = owner(t) if t.split(".")[0] == "localspec" else None
                # importing one's own ancestor package (its __init__) is not a circle
                if r and r != m and not m.startswith(r + "."):
                    edges[m].add(r)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of size > 1."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


def test_the_walk_finds_a_circle_when_there_is_one() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]


def test_rooms_keep_their_walls() -> None:
    """verify/ is pure numpy; only backend/ touches llama_cpp or ctypes; frontends reach the
    engine through the session interface, never through decode/ or the backend."""
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG).as_posix()
        src = f.read_text(encoding="utf-8")
        tree = ast.parse(src)
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
        if not rel.startswith("backend/"):
            assert not names & {"llama_cpp", "ctypes"}, f"{rel} imports {names & {'llama_cpp', 'ctypes'}}"
    graph = _graph()
    for m, deps in graph.items():
        if m.startswith("localspec.verify"):
            assert all(d.startswith("localspec.verify") for d in deps), (m, deps)
        if m.startswith(FRONTENDS):
            bad = {d for d in deps if d.startswith(("localspec.decode", "localspec.backend"))}
            assert not bad, f"{m} reaches past runtime/tools into {sorted(bad)}"


FRONTENDS = ("localspec.cli", "localspec.tui", "localspec.server", "localspec.bench", "localspec.flags")


def test_bench_and_server_never_import_the_cli() -> None:
    """cli/main.py registers bench/'s and server/'s subcommands, so they must not import cli/
    back (a folder-level loop); the flags the three share live in flags/, below all three,
    which imports none of the frontends."""
    graph = _graph()
    for m, deps in graph.items():
        if m.startswith(("localspec.bench", "localspec.server")):
            bad = {d for d in deps if d == "localspec.cli" or d.startswith("localspec.cli.")}
            assert not bad, f"{m} imports {sorted(bad)}: shared flags belong in localspec/flags/"
        if m.startswith("localspec.flags"):
            bad = {d for d in deps if d.startswith(("localspec.cli", "localspec.bench", "localspec.server",
                                                    "localspec.tui"))}
            assert not bad, f"{m} imports the frontends {sorted(bad)}: flags/ sits below them"


def test_no_subcommand_import_is_swallowed() -> None:
    """A broken import must fail loudly, never silently delete a subcommand (cli/main.py
    once wrapped five registrations in `except ImportError: pass`)."""
    for f in (PKG / "cli").glob("*.py"):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and isinstance(node.type, ast.Name) and node.type.id == "ImportError":
                assert not (len(node.body) == 1 and isinstance(node.body[0], ast.Pass)), f"{f.name}:{node.lineno}"


def test_top_level_holds_only_the_core() -> None:
    """Features live in their rooms (cli/, thinking/, placement/, ...): the top level keeps
    the shared core modules only."""
    top = sorted(f.stem for f in PKG.glob("*.py"))
    assert top == ["__init__", "config", "errors", "events", "loading", "pool", "runtime", "sampling", "sampling_defaults",
                   "session", "settings", "stopflag", "tools"], top
