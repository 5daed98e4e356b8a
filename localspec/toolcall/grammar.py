"""The grammar of a tool call: `{"name": one of the tools, "arguments": that tool's schema}`.

The grammar covers the call's JSON alone, never its markers: the engine's trigger gate
(decode/tool_gate.py) writes or watches the opening marker (`<tool_call>`, `[TOOL_CALLS]`)
token by token and hands over to this grammar right after it; once the call's JSON is
complete the gate frees the model again, which then closes the tag, ends the turn or opens
another call (the grammar starts afresh at the next marker). So the same Lark text serves
whether a template's marker is one special token or plain text, and no special-token syntax
(which llguidance resolves per tokenizer) is needed.

The fixed parts are written the way the templates show them to the model
(`{"name": "f", "arguments": ` with Qwen's spacing): the grammar forces them, so they cost
no draft (the grammar drafter proposes forced text) and match what the model would write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from localspec.toolcall.formats import Format


def _lit(text: str) -> str:
    """A Lark string literal for `text`."""
    return json.dumps(text, ensure_ascii=False)


def call_grammar(fmt: Format, tools: Sequence[Mapping], *, parallel: bool = True) -> str:
    """Lark text of what follows the format's trigger (the whole answer for Llama 3's bare
    JSON): one call of one of `tools` (OpenAI function tools; a tool without `parameters`
    takes any object). Mistral's v7 array holds several calls when `parallel`; Hermes writes
    one call per `<tool_call>` block, and another block is another trigger."""
    rules = []
    names = []
    for i, tool in enumerate(tools):
        fn = tool["function"]
        schema = fn.get("parameters") or {"type": "object"}
        head = f'{{"name": {json.dumps(fn["name"], ensure_ascii=False)}, "{fmt.args_key}": '
        rules.append(f"fn_{i}: {_lit(head)} args_{i} {_lit('}')}")
        rules.append(f"args_{i}: %json {json.dumps(schema, ensure_ascii=False)}")
        names.append(f"fn_{i}")
    call = "call: " + " | ".join(names)
    if fmt.name == "mistral":
        more = ' ("," " "? call)*' if parallel else ""
        start = f'start: " "? "[" call{more} "]"'
    elif fmt.open:  # Hermes: `<tool_call>\n{...}\n</tool_call>`; the newlines are the template's
        start = 'start: "\\n"? call "\\n"?'
    else:
        start = "start: call"
    return "\n".join([start, call, *rules]) + "\n"
