"""Tiny random-weight GGUFs of several llama.cpp architectures, for memory-kind tests.

Speculative decoding must treat a model by the kind of memory its context keeps: a plain KV
cache (rewind by removing positions), a sliding-window cache (positions older than the window
are gone), a recurrent state (no per-position history: rollback needs snapshots, llama.cpp's
`n_rs_seq`, or a re-decode) or a hybrid of recurrent and attention layers. No Qwen3.5, Mamba2,
Gemma3 or Qwen3-MoE weights are reachable offline, and the tests need only the architecture
(so llama.cpp builds that arch's graph and memory) and a vocabulary, not sensible text. So,
as tests/support/tiny_qwen3.py does for qwen3, these files take Qwen2.5's tokenizer (`Tokenizer`,
`read_qwen25_tokenizer`), a plain ChatML template and random weights: F16 token embedding and
untied F16 output head (151,936 x 32 each: 19.4 MB of a ~25.5 MB file, the tokenizer is most
of the rest), F32 elsewhere.

Architectures (`ARCHS`); llama_model_is_recurrent / llama_model_is_hybrid in brackets:

- "qwen35": Qwen3.5's hybrid (hybrid). 4 layers, `full_attention_interval` 4: layers 0-2
  are gated-delta-net linear attention (1 key head, 2 value heads, head dim 16, conv 4),
  layer 3 gated full attention (2 q heads, 1 kv head, head dim 16, M-RoPE sections 3/3/2).
  `nextn=1` appends an MTP block (`qwen35.nextn_predict_layers` = 1, block_count 5: a full
  attention block plus nextn.eh_proj/enorm/hnorm/shared_head_norm; its embedding and head
  are the trunk's), so llama_model_n_layer_nextn reports 1. llama.cpp supports recurrent
  rollback (`n_rs_seq`) for this arch; measured: rolling back r tokens with seq_rm gives the
  right state for r < the length of the last decoded batch, while r equal to it (all of that
  batch) returns true but leaves a wrong state.
- "mamba2": pure Mamba2 (recurrent). 2 layers, d_inner 64, d_state 128 (the sizes Vulkan's
  ssm_scan accepts), 4 heads of 16, 1 group, conv 4. llama.cpp clamps `n_rs_seq` to 0 here.
- "gemma3": Gemma3 (neither). 3 layers, sliding window `n_swa` on layers 0 and 1
  (`sliding_window_pattern` 3: two local layers, then a global one), GELU FFN, q/k norms.
  llama.cpp's default context keeps a full-size SWA cache (`swa_full`); set it false for
  the window to drop old positions.
- "qwen3moe": Qwen3-MoE (neither). 2 layers, 4 experts of width 32, 2 used per token.
- "qwen3": delegates to tiny_qwen3.write_tiny_qwen3 (2 dense layers, Qwen3's template).

A draft for a target is `write_tiny(..., seed=<the target's seed>, noise=DRAFT_NOISE)`: the
same weights plus relative Gaussian noise, so the draft's greedy token agrees with the
target's on part (not all) of the positions. Measured with llama-cpp-python 0.3.36 on CPU
(seed 0, noise_seed 1; the draft's argmax on the target's own 40 greedy tokens after three
short prompts), the agreement at noise 0.05 was qwen3 0.74, qwen35 0.53, mamba2 0.68,
gemma3 0.78, qwen3moe 0.70 (at 0.02: 0.72..0.90; at 0.1: 0.23..0.61). Free-running greedy
generations of target and draft part within the first few tokens. Adding an MTP block
(nextn=1) leaves the trunk's weights and outputs as they are for the same seed. write_tiny
takes ~0.6 s; reading the tokenizer (read_qwen25_tokenizer, ~7-10 s) is separate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tests.support.tiny_qwen3 import (
    Tokenizer,
    read_qwen25_tokenizer,
    write_tiny_qwen3,
    write_tokenizer,
)

if TYPE_CHECKING:
    from gguf import GGUFWriter

__all__ = ["ARCHS", "CHATML_TEMPLATE", "DRAFT_NOISE", "Tokenizer", "read_qwen25_tokenizer",
           "write_tiny"]

ARCHS = ("qwen3", "qwen35", "mamba2", "gemma3", "qwen3moe")

# relative weight noise for a near-copy draft that agrees with its target part of the time
DRAFT_NOISE = 0.05

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

Rand = Callable[..., np.ndarray]


def write_tiny(
    path: Path,
    arch: str,
    tok: Tokenizer,
    *,
    seed: int = 0,
    noise: float = 0.0,
    noise_seed: int = 1,
    n_embd: int = 32,
    nextn: int = 0,
    n_swa: int = 8,
    echo: float | None = None,
) -> Path:
    """Write a random-weight GGUF of llama.cpp architecture `arch` (one of ARCHS) to `path`.

    `seed` picks the weights; `noise` > 0 adds `noise` x (each tensor's std) Gaussian noise
    drawn from `noise_seed`, making a near-copy draft of the `seed` file (DRAFT_NOISE = 0.05
    agrees with the target on ~50-80% of greedy tokens).
    `nextn` (qwen35 only, 0 or 1) appends that many MTP/nextn blocks; `echo` (with nextn=1)
    makes a target whose MTP block guesses right part of the time (see _qwen35). `n_swa` is gemma3's
    sliding window in tokens. `n_embd` must be a multiple of 16. Returns `path`.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")
    if nextn and arch != "qwen35":
        raise ValueError(f"nextn is only written for qwen35, not {arch}")
    if nextn not in (0, 1):
        raise ValueError("llama.cpp's qwen35 MTP supports exactly one nextn block")
    if echo is not None and not nextn:
        raise ValueError("echo shapes the nextn block: pass nextn=1")
    if n_embd % 16:
        raise ValueError("n_embd must be a multiple of 16")
    if arch == "qwen3":
        return write_tiny_qwen3(path, tok, seed=seed, n_embd=n_embd, noise=noise,
                                noise_seed=noise_seed)

    import gguf

    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng(noise_seed)

    def rand(*shape: int, std: float, mean: float = 0.0) -> np.ndarray:
        x = rng.standard_normal(shape)
        if noise:
            x += noise * noise_rng.standard_normal(shape)
        return (mean + x * std).astype(np.float32)

    n_vocab = len(tok.tokens)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}-seed{seed}")
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    write_tokenizer(w, tok, n_vocab, CHATML_TEMPLATE)

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd, std=1.0).astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    # an untied random head: with tied embeddings a random model just repeats its last token
    w.add_tensor("output.weight", rand(n_vocab, n_embd, std=0.5).astype(np.float16))

    if arch == "qwen35":
        _qwen35(w, rand, n_embd, nextn, echo)
    elif arch == "mamba2":
        _mamba2(w, rand, n_embd)
    elif arch == "gemma3":
        _gemma3(w, rand, n_embd, n_swa)
    else:
        _qwen3moe(w, rand, n_embd)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _linear(rand: Rand, n_out: int, n_in: int) -> np.ndarray:
    """A weight of ggml shape {n_in, n_out} (numpy (n_out, n_in)), std 1/sqrt(n_in)."""
    return rand(n_out, n_in, std=n_in ** -0.5)


def _ones(n: int) -> np.ndarray:
    return np.ones(n, np.float32)


def _attention(w: GGUFWriter, rand: Rand, p: str, n_embd: int, n_head: int, n_head_kv: int,
               head_dim: int) -> None:
    """Plain attention with q/k norms (gemma3, qwen3moe): q, k, v, output, the two norms."""
    w.add_tensor(p + "attn_q.weight", _linear(rand, n_head * head_dim, n_embd))
    w.add_tensor(p + "attn_k.weight", _linear(rand, n_head_kv * head_dim, n_embd))
    w.add_tensor(p + "attn_v.weight", _linear(rand, n_head_kv * head_dim, n_embd))
    w.add_tensor(p + "attn_output.weight", _linear(rand, n_embd, n_head * head_dim))
    w.add_tensor(p + "attn_q_norm.weight", _ones(head_dim))
    w.add_tensor(p + "attn_k_norm.weight", _ones(head_dim))


def _swiglu_ffn(w: GGUFWriter, rand: Rand, p: str, n_embd: int, n_ff: int, down: float = 1.0) -> None:
    w.add_tensor(p + "ffn_gate.weight", _linear(rand, n_ff, n_embd))
    w.add_tensor(p + "ffn_up.weight", _linear(rand, n_ff, n_embd))
    w.add_tensor(p + "ffn_down.weight", down * _linear(rand, n_embd, n_ff))


def _qwen35(w: GGUFWriter, rand: Rand, n_embd: int, nextn: int, echo: float | None = None) -> None:
    """Qwen3.5 (llama.cpp src/models/qwen35.cpp): 3 gated-delta-net layers + 1 attention.

    A random MTP block guesses tokens the target almost never emits, so a test of the
    acceptance path would accept nothing. `echo` e scales every layer's output (attention,
    linear attention, FFN; the trunk's and the MTP block's) by e, so the target's next token
    is mostly a bigram of its embedding and head, and writes eh_proj = [I | e R]: the block
    keeps the token's normed embedding and adds e times a random view of the target's hidden
    state. The block then guesses that bigram, and the hidden state and the block's
    attention still shape every guess (drafted tokens check the whole hand-off)."""
    scale = 1.0 if echo is None else echo
    n_layer, interval = 4, 4
    n_head, n_head_kv, head_dim, n_ff = 2, 1, 16, 64
    # linear attention: head_k_dim = head_v_dim = d_state; k heads = group count,
    # v heads = time_step_rank; d_inner = d_state * v heads; S_v 16 is a Vulkan GDN size
    d_state, n_k_heads, n_v_heads, d_conv = 16, 1, 2, 4
    d_inner = d_state * n_v_heads
    key_dim, value_dim = d_state * n_k_heads, d_state * n_v_heads
    conv_dim = 2 * key_dim + value_dim

    w.add_block_count(n_layer + nextn)
    if nextn:
        w.add_nextn_predict_layers(nextn)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_dimension_sections([3, 3, 2, 0])  # M-RoPE: sums to head_dim / 2
    w.add_rope_freq_base(10_000_000.0)
    w.add_full_attention_interval(interval)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(n_v_heads)
    w.add_ssm_group_count(n_k_heads)

    def attention(p: str, out: float = 1.0) -> None:
        # the q projection carries q and its output gate: 2 * n_head * head_dim rows
        w.add_tensor(p + "attn_q.weight", _linear(rand, 2 * n_head * head_dim, n_embd))
        w.add_tensor(p + "attn_k.weight", _linear(rand, n_head_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_v.weight", _linear(rand, n_head_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_output.weight", out * _linear(rand, n_embd, n_head * head_dim))
        w.add_tensor(p + "attn_q_norm.weight", _ones(head_dim))
        w.add_tensor(p + "attn_k_norm.weight", _ones(head_dim))

    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", _ones(n_embd))
        w.add_tensor(p + "post_attention_norm.weight", _ones(n_embd))
        if (i + 1) % interval == 0:
            attention(p, scale)
        else:
            w.add_tensor(p + "attn_qkv.weight", _linear(rand, conv_dim, n_embd))
            w.add_tensor(p + "attn_gate.weight", _linear(rand, value_dim, n_embd))
            w.add_tensor(p + "ssm_conv1d.weight", rand(conv_dim, d_conv, std=d_conv ** -0.5))
            # decay per token exp(A * softplus(alpha + dt)): A = -exp(A_log) ~ -1, dt ~ -2
            w.add_tensor(p + "ssm_dt.bias", rand(n_v_heads, std=0.5, mean=-2.0))
            w.add_tensor(p + "ssm_a", -np.exp(rand(n_v_heads, std=0.5)))
            w.add_tensor(p + "ssm_beta.weight", _linear(rand, n_v_heads, n_embd))
            w.add_tensor(p + "ssm_alpha.weight", _linear(rand, n_v_heads, n_embd))
            w.add_tensor(p + "ssm_norm.weight", _ones(d_state))
            w.add_tensor(p + "ssm_out.weight", scale * _linear(rand, n_embd, value_dim))
        _swiglu_ffn(w, rand, p, n_embd, n_ff, scale)
    for i in range(n_layer, n_layer + nextn):
        # MTP block: a full-attention block fed by eh_proj([enorm(embd); hnorm(h)])
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", _ones(n_embd))
        w.add_tensor(p + "post_attention_norm.weight", _ones(n_embd))
        attention(p, scale)
        _swiglu_ffn(w, rand, p, n_embd, n_ff, scale)
        eh = _linear(rand, n_embd, 2 * n_embd)
        if echo is not None:
            eh = np.concatenate([np.eye(n_embd, dtype=np.float32), echo * eh[:, n_embd:]], axis=1)
        w.add_tensor(p + "nextn.eh_proj.weight", eh)
        w.add_tensor(p + "nextn.enorm.weight", _ones(n_embd))
        w.add_tensor(p + "nextn.hnorm.weight", _ones(n_embd))
        w.add_tensor(p + "nextn.shared_head_norm.weight", _ones(n_embd))


def _mamba2(w: GGUFWriter, rand: Rand, n_embd: int) -> None:
    """Mamba2 (llama.cpp src/models/mamba2.cpp, mamba-base.cpp): 2 SSM layers, no FFN."""
    n_layer = 2
    # d_state 128 and head_dim % 16 == 0 are what Vulkan's ssm_scan runs (else CPU fallback)
    d_inner, d_state, n_head, n_group, d_conv = 2 * n_embd, 128, 4, 1, 4
    conv_dim = d_inner + 2 * n_group * d_state
    d_in_proj = d_inner + conv_dim + n_head  # z, xBC, dt

    w.add_block_count(n_layer)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(n_head)
    w.add_ssm_group_count(n_group)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", _ones(n_embd))
        w.add_tensor(p + "ssm_in.weight", _linear(rand, d_in_proj, n_embd))
        w.add_tensor(p + "ssm_conv1d.weight", rand(conv_dim, d_conv, std=d_conv ** -0.5))
        w.add_tensor(p + "ssm_conv1d.bias", rand(conv_dim, std=0.1))
        w.add_tensor(p + "ssm_dt.bias", rand(n_head, std=0.5, mean=-2.0))
        w.add_tensor(p + "ssm_a", -np.exp(rand(n_head, 1, std=0.5)))  # A = -exp(A_log)
        w.add_tensor(p + "ssm_d", np.ones((n_head, 1), np.float32))
        w.add_tensor(p + "ssm_norm.weight", np.ones((n_group, d_inner // n_group), np.float32))
        w.add_tensor(p + "ssm_out.weight", _linear(rand, n_embd, d_inner))


def _gemma3(w: GGUFWriter, rand: Rand, n_embd: int, n_swa: int) -> None:
    """Gemma3 (llama.cpp src/models/gemma3.cpp): 2 sliding-window layers + 1 global."""
    n_layer, pattern = 3, 3  # llama.cpp: layer il is local iff il % pattern < pattern - 1
    n_head, n_head_kv, head_dim, n_ff = 2, 1, 16, 64
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_sliding_window(n_swa)
    w.add_sliding_window_pattern(pattern)
    # norms are stored as llama.cpp reads them (Gemma's 1 + w already folded in)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", _ones(n_embd))
        _attention(w, rand, p, n_embd, n_head, n_head_kv, head_dim)
        w.add_tensor(p + "post_attention_norm.weight", _ones(n_embd))
        w.add_tensor(p + "ffn_norm.weight", _ones(n_embd))
        _swiglu_ffn(w, rand, p, n_embd, n_ff)
        w.add_tensor(p + "post_ffw_norm.weight", _ones(n_embd))


def _qwen3moe(w: GGUFWriter, rand: Rand, n_embd: int) -> None:
    """Qwen3-MoE (llama.cpp src/models/qwen3moe.cpp): 2 layers of 4 experts, 2 used."""
    n_layer, n_head, n_head_kv, head_dim = 2, 2, 1, 16
    n_expert, n_expert_used, n_ff_exp = 4, 2, 32
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff_exp * n_expert_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_expert_used)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", _ones(n_embd))
        _attention(w, rand, p, n_embd, n_head, n_head_kv, head_dim)
        w.add_tensor(p + "ffn_norm.weight", _ones(n_embd))
        w.add_tensor(p + "ffn_gate_inp.weight", _linear(rand, n_expert, n_embd))
        w.add_tensor(p + "ffn_gate_exps.weight",
                     rand(n_expert, n_ff_exp, n_embd, std=n_embd ** -0.5))
        w.add_tensor(p + "ffn_up_exps.weight", rand(n_expert, n_ff_exp, n_embd, std=n_embd ** -0.5))
        w.add_tensor(p + "ffn_down_exps.weight",
                     rand(n_expert, n_embd, n_ff_exp, std=n_ff_exp ** -0.5))


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
