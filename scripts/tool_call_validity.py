"""How often a model's tool calls parse and hold to their schema, per tool_choice, on six
coding-agent asks with four tools (greedy, plain decoding; a quick check, not the agent bench):

    python scripts/tool_call_validity.py [MODEL]        # default: qwen2.5-coder-0.5b

"unconstrained" renders the tools and parses the answer (what llama-server does without a
grammar); "auto" adds the lazy grammar (held from the `<tool_call>` marker on); "required"
forces the call. Prints each answer's start and the count of schema-valid calls per mode.
"""

from __future__ import annotations

import json
import sys
import time

import jsonschema

from localspec.config import GenConfig, SamplingConfig
from localspec.loading import open_session
from localspec.server.tools import detect_format, parse_tools, template_tools, tool_constraint
from localspec.session import SessionOptions
from localspec.toolcall import parse_calls


def tool(name: str, desc: str, props: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props, "required": required, "additionalProperties": False}}}


TOOLS = [
    tool("read_file", "Read a file of the repository", {"path": {"type": "string"}}, ["path"]),
    tool("edit_file", "Replace text in a file",
         {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}, ["path", "old", "new"]),
    tool("run_tests", "Run the test suite, optionally one test file",
         {"file": {"type": "string"}, "verbose": {"type": "boolean"}}, []),
    tool("search", "Search the code for a regex",
         {"pattern": {"type": "string"}, "max_results": {"type": "integer", "minimum": 1}}, ["pattern"]),
]
ASKS = [
    "Open src/app.py and show me what it does.",
    "Find where the function parse_config is defined.",
    "Rename the variable cnt to count in utils/math.py.",
    "Run the tests in tests/test_api.py verbosely.",
    "Does the repo use asyncio anywhere? Search for it, at most 5 hits.",
    "Fix the typo 'recieve' -> 'receive' in README.md.",
]


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-0.5b"
    s = open_session(model, None, SessionOptions(n_ctx=4096))
    fmt = detect_format(s)
    if fmt is None:
        sys.exit(f"{model}: its chat template renders no tools")
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for mode in ("unconstrained", "auto", "required"):
        valid, t0 = 0, time.perf_counter()
        for ask in ASKS:
            tr = parse_tools({"tools": TOOLS, "tool_choice": "required" if mode == "required" else "auto"}, fmt)
            spec = None if mode == "unconstrained" else tool_constraint(tr, fmt)
            cfg = GenConfig(method="ar", n_predict=96, sampling=SamplingConfig(temp=0.0), constraint=spec)
            text = list(s.generate([{"role": "user", "content": ask}], cfg, template_kwargs=template_tools(tr)))[-1].text
            calls = parse_calls(text, fmt, TOOLS).calls
            ok = False
            if calls:
                try:
                    jsonschema.validate(json.loads(calls[0].arguments), schemas[calls[0].name])
                    ok = True
                except jsonschema.ValidationError:
                    pass
            valid += ok
            print(f"{mode:13} {'valid' if ok else 'NO   '} {text[:100]!r}", flush=True)
        print(f"== {mode}: {valid}/{len(ASKS)} schema-valid calls ({time.perf_counter() - t0:.0f} s)", flush=True)
    s.close()


if __name__ == "__main__":
    main()
