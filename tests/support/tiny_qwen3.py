"""A tiny random-weight GGUF of llama.cpp's `qwen3` architecture, for thinking-model tests.

No Qwen3 weights are on this machine, and the tests need only three things a real Qwen3 has:
its architecture (so llama.cpp runs its graph), its vocabulary (Qwen2.5's 151,936 tokens
where ids 151665..151668 are `<tool_response>`, `</tool_response>`, `<think>`, `</think>`,
exactly where Qwen3 puts them), and its chat template's thinking structure
(`enable_thinking`, the `<think>` block of the last assistant turn). The tokenizer is copied
from the cached Qwen2.5 GGUF (read with gguf.GGUFReader, ~10 s on 2 cores: once per test
session); the weights are random (2 layers, 32 wide), so the text is gibberish but every
decoding method runs on it, a second file with another seed is a draft with the same vocab,
and `n_vocab` can be cut by padding tokens to test the vocabulary check.

The think tokens are USER_DEFINED (token type 4), as in Qwen3's own GGUFs (its tokenizer
marks them `special: false`): llama.cpp parses them as one token and renders their text, so
they appear in the visible answer, which is what the reasoning splitter reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

QWEN25_GGUF = Path.home() / ".cache" / "localspec" / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

# Qwen3's additions to the Qwen2.5 vocabulary (ids from Qwen3's tokenizer.json)
QWEN3_ADDED = {151665: "<tool_response>", 151666: "</tool_response>", 151667: "<think>", 151668: "</think>"}
USER_DEFINED = 4

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
    import gguf

    r = gguf.GGUFReader(str(path))

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


def write_tokenizer(w, tok: Tokenizer, n_vocab: int, template: str) -> None:
    """The tokenizer keys (Qwen2.5's BPE, its first n_vocab tokens) and the chat template."""
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


def write_tiny_qwen3(
    path: Path,
    tok: Tokenizer,
    *,
    seed: int = 0,
    n_layer: int = 2,
    n_embd: int = 32,
    n_vocab: int | None = None,
    template: str = QWEN3_TEMPLATE,
    sampling: dict[str, float] | None = None,
    noise: float = 0.0,
    noise_seed: int = 1,
) -> Path:
    """Write a random-weight qwen3 GGUF (F16 embedding and head, F32 elsewhere; ~20 MB).

    n_vocab < len(tok.tokens) drops trailing (padding) tokens: two such files differ only
    by padding, like Qwen2.5's 151,936 vs 152,064. `sampling` writes llama.cpp's
    general.sampling.* keys (temp, top_k, top_p, min_p). `noise` > 0 perturbs the weights
    of `seed` (relative std): a related draft that agrees with that target part of the time.
    """
    import gguf

    n_vocab = n_vocab or len(tok.tokens)
    n_head, n_head_kv, head_dim, n_ff = 2, 1, 16, 64
    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng(noise_seed)
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name(f"tiny-qwen3-seed{seed}")
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    write_tokenizer(w, tok, n_vocab, template)
    for key, value in (sampling or {}).items():
        getattr(w, f"add_sampling_{key}")(value)

    def rand(*shape: int, std: float) -> np.ndarray:
        x = rng.standard_normal(shape)
        if noise:
            x += noise * noise_rng.standard_normal(shape)
        return (x * std).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd, std=1.0).astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    # an untied random head: with tied embeddings a random model just repeats its last token
    w.add_tensor("output.weight", rand(n_vocab, n_embd, std=0.5).astype(np.float16))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(p + "attn_q.weight", rand(n_head * head_dim, n_embd, std=n_embd ** -0.5))
        w.add_tensor(p + "attn_k.weight", rand(n_head_kv * head_dim, n_embd, std=n_embd ** -0.5))
        w.add_tensor(p + "attn_v.weight", rand(n_head_kv * head_dim, n_embd, std=n_embd ** -0.5))
        w.add_tensor(p + "attn_output.weight", rand(n_embd, n_head * head_dim, std=(n_head * head_dim) ** -0.5))
        w.add_tensor(p + "attn_q_norm.weight", np.ones(head_dim, np.float32))
        w.add_tensor(p + "attn_k_norm.weight", np.ones(head_dim, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(n_ff, n_embd, std=n_embd ** -0.5))
        w.add_tensor(p + "ffn_up.weight", rand(n_ff, n_embd, std=n_embd ** -0.5))
        w.add_tensor(p + "ffn_down.weight", rand(n_embd, n_ff, std=n_ff ** -0.5))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
