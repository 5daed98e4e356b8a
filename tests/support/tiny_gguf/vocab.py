"""Vocabularies and chat templates for the tiny GGUFs.

- `read_qwen25_tokenizer`: Qwen2.5's byte-level BPE (151,936 tokens) copied from the cached
  Qwen2.5 GGUF (gguf.GGUFReader, ~7-10 s on 2 cores: once per test session), with Qwen3's
  four added tokens in place of padding: ids 151665..151668 are `<tool_response>`,
  `</tool_response>`, `<think>`, `</think>`, exactly where Qwen3 puts them. They are
  USER_DEFINED (token type 4), as in Qwen3's own GGUFs (its tokenizer marks them
  `special: false`): llama.cpp parses each as one token and renders its text, so they appear
  in the visible answer, which is what the reasoning splitter reads.
- `byte_tokenizer`: 259 GPT-2 byte-level tokens, no cached model needed (the offline GPU check).
- `spm_vocab`: a synthetic SentencePiece-style vocabulary (byte tokens + placeholders) of any
  size, for the Qwen2.5-shaped files (shapes.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

QWEN25_GGUF = Path.home() / ".cache" / "localspec" / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

# Qwen3's additions to the Qwen2.5 vocabulary (ids from Qwen3's tokenizer.json)
QWEN3_ADDED = {151665: "<tool_response>", 151666: "</tool_response>", 151667: "<think>", 151668: "</think>"}
USER_DEFINED = 4

# Plain ChatML: the template of every tiny architecture but qwen3.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen3's chat template (the thinking parts, tools left out), as shipped with Qwen3 GGUFs:
# a past assistant turn before the last user query keeps only its answer; the last turn
# (after the query) keeps its <think> block; enable_thinking=false writes an empty block
# into the generation prompt.
QWEN3_TEMPLATE = """\
{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

# DeepSeek-R1-distill style: the generation prompt already opens the block (`<think>\n`),
# and past assistant turns are kept verbatim (think block included), as plain ChatML does,
# so the history rule (answer only) must change the rendered history.
OPEN_THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


@dataclass(frozen=True)
class Tokenizer:
    """The fields of a GGUF's tokenizer that a model file needs."""

    tokens: list[bytes]
    types: list[int]
    merges: list[bytes]
    eos: int
    bos: int
    pad: int


def read_qwen25_tokenizer(path: Path = QWEN25_GGUF) -> Tokenizer:
    """Qwen2.5's tokenizer with Qwen3's four added tokens in place of padding."""
    from .layers import load_gguf

    r = load_gguf().GGUFReader(str(path))

    def strings(key: str) -> list[bytes]:
        f = r.fields[key]
        return [bytes(f.parts[i]) for i in f.data]

    def scalar(key: str) -> int:
        return int(r.fields[key].contents())

    tokens = strings("tokenizer.ggml.tokens")
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    for i, text in QWEN3_ADDED.items():
        tokens[i] = text.encode()
        types[i] = USER_DEFINED
    return Tokenizer(tokens, types, strings("tokenizer.ggml.merges"), scalar("tokenizer.ggml.eos_token_id"),
                     scalar("tokenizer.ggml.bos_token_id"), scalar("tokenizer.ggml.padding_token_id"))


def byte_tokenizer() -> Tokenizer:
    """A 259-token GPT-2 byte-level vocabulary (the 256 bytes + ChatML's markers + EOS) with
    one merge (llama.cpp's BPE loader needs at least one): a ~0.2 MB tiny file that needs no
    cached model, for places that cannot read Qwen2.5's tokenizer (the offline GPU check)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    to_char, extra = {}, 0
    for b in range(256):
        if b in printable:
            to_char[b] = chr(b)
        else:
            to_char[b] = chr(256 + extra)
            extra += 1
    tokens = [to_char[b].encode() for b in range(256)] + [b"<|im_start|>", b"<|im_end|>", b"<|endoftext|>"]
    types = [1] * 256 + [3, 3, 3]  # normal, then control
    merges = [f"{to_char[ord('a')]} {to_char[ord('b')]}".encode()]
    return Tokenizer(tokens, types, merges, eos=257, bos=258, pad=258)


def write_tokenizer(w, tok: Tokenizer, n_vocab: int, template: str) -> None:
    """The tokenizer keys (a GPT-2-style BPE, its first n_vocab tokens) and the chat template."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tok.tokens[:n_vocab])
    w.add_token_types(tok.types[:n_vocab])
    w.add_token_merges(tok.merges)
    w.add_eos_token_id(tok.eos)
    w.add_bos_token_id(tok.bos)
    w.add_pad_token_id(tok.pad)
    w.add_add_bos_token(False)
    w.add_chat_template(template)


def spm_vocab(n: int) -> tuple[list[str], list[float], list[int]]:
    """<unk> <s> </s>, the 256 byte tokens, then placeholders: a vocabulary llama.cpp loads."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types_ = [2, 3, 3] + [6] * 256  # unknown, control, control, byte
    tokens += [f"\u2581w{i}" for i in range(n - len(tokens))]
    types_ += [1] * (n - len(types_))
    scores = [0.0] * 259 + [-float(i) for i in range(n - 259)]
    return tokens, scores, types_


def write_spm_tokenizer(w, n_vocab: int) -> None:
    """spm_vocab(n_vocab) as a llama-style (SentencePiece) tokenizer: BOS 1, EOS 2, UNK 0."""
    toks, scores, ttypes = spm_vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(ttypes)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
