"""Tool calls: which format a chat template asks for, the grammar of a call, and parsing
the model's text back into calls.

Pure Python with no engine imports, so every frontend (the server's chat route and the
Anthropic / Responses adapters on top of it) shares one implementation:

    fmt = detect(render)                               # from the model's own chat template
    parse_calls(text, fmt, names) -> Parsed(content, calls)   # the answer -> OpenAI tool_calls
    call_grammar(fmt, tools, parallel) -> Lark text    # the constraint after the call's opening marker

Formats (formats.py): Hermes / Qwen2.5 / Qwen3 `<tool_call>{json}</tool_call>`, the XML-ish
`<function=NAME><parameter=P>` of Qwen3-Coder / Qwen3.5, Llama 3.x JSON (`<|python_tag|>`
optional), Mistral `[TOOL_CALLS]`.
"""

from localspec.toolcall.formats import FORMATS, Call, Format, Parsed, detect, parse_calls
from localspec.toolcall.grammar import call_grammar

__all__ = ["FORMATS", "Call", "Format", "Parsed", "call_grammar", "detect", "parse_calls"]
