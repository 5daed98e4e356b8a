"""The tiny architectures with a recurrent state: qwen35 (hybrid) and mamba2 (recurrent)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .layers import Rand, attention, attention_heads, linear, ones, swiglu_ffn

if TYPE_CHECKING:
    from gguf import GGUFWriter


def qwen35(w: GGUFWriter, rand: Rand, n_embd: int, nextn: int, echo: float | None = None) -> None:
    """Qwen3.5 (llama.cpp src/models/qwen35.cpp): 3 gated-delta-net layers + 1 attention.

    `full_attention_interval` 4: layers 0-2 are gated-delta-net linear attention (1 key head,
    2 value heads, head dim 16, conv 4), layer 3 gated full attention (2 q heads, 1 kv head,
    head dim 16, M-RoPE sections 3/3/2). `nextn=1` appends an MTP block
    (`qwen35.nextn_predict_layers` = 1, block_count 5: a full attention block plus
    nextn.eh_proj/enorm/hnorm/shared_head_norm; its embedding and head are the trunk's), so
    llama_model_n_layer_nextn reports 1; the trunk's weights stay as they are for the seed.

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
    attention_heads(w, n_head, n_head_kv, head_dim)
    w.add_rope_dimension_sections([3, 3, 2, 0])  # M-RoPE: sums to head_dim / 2
    w.add_rope_freq_base(10_000_000.0)
    w.add_full_attention_interval(interval)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(n_v_heads)
    w.add_ssm_group_count(n_k_heads)

    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(n_embd))
        w.add_tensor(p + "post_attention_norm.weight", ones(n_embd))
        if (i + 1) % interval == 0:
            attention(w, rand, p, n_embd, n_head, n_head_kv, head_dim, q_gate=True, out=scale)
        else:
            w.add_tensor(p + "attn_qkv.weight", linear(rand, conv_dim, n_embd))
            w.add_tensor(p + "attn_gate.weight", linear(rand, value_dim, n_embd))
            w.add_tensor(p + "ssm_conv1d.weight", rand(conv_dim, d_conv, std=d_conv ** -0.5))
            # decay per token exp(A * softplus(alpha + dt)): A = -exp(A_log) ~ -1, dt ~ -2
            w.add_tensor(p + "ssm_dt.bias", rand(n_v_heads, std=0.5, mean=-2.0))
            w.add_tensor(p + "ssm_a", -np.exp(rand(n_v_heads, std=0.5)))
            w.add_tensor(p + "ssm_beta.weight", linear(rand, n_v_heads, n_embd))
            w.add_tensor(p + "ssm_alpha.weight", linear(rand, n_v_heads, n_embd))
            w.add_tensor(p + "ssm_norm.weight", ones(d_state))
            w.add_tensor(p + "ssm_out.weight", scale * linear(rand, n_embd, value_dim))
        swiglu_ffn(w, rand, p, n_embd, n_ff, scale)
    for i in range(n_layer, n_layer + nextn):
        # MTP block: a full-attention block fed by eh_proj([enorm(embd); hnorm(h)])
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(n_embd))
        w.add_tensor(p + "post_attention_norm.weight", ones(n_embd))
        attention(w, rand, p, n_embd, n_head, n_head_kv, head_dim, q_gate=True, out=scale)
        swiglu_ffn(w, rand, p, n_embd, n_ff, scale)
        eh = linear(rand, n_embd, 2 * n_embd)
        if echo is not None:
            eh = np.concatenate([np.eye(n_embd, dtype=np.float32), echo * eh[:, n_embd:]], axis=1)
        w.add_tensor(p + "nextn.eh_proj.weight", eh)
        w.add_tensor(p + "nextn.enorm.weight", ones(n_embd))
        w.add_tensor(p + "nextn.hnorm.weight", ones(n_embd))
        w.add_tensor(p + "nextn.shared_head_norm.weight", ones(n_embd))


def mamba2(w: GGUFWriter, rand: Rand, n_embd: int) -> None:
    """Mamba2 (llama.cpp src/models/mamba2.cpp, mamba-base.cpp): 2 SSM layers, no FFN.
    d_inner 2 n_embd, d_state 128, 4 heads, 1 group, conv 4."""
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
        w.add_tensor(p + "attn_norm.weight", ones(n_embd))
        w.add_tensor(p + "ssm_in.weight", linear(rand, d_in_proj, n_embd))
        w.add_tensor(p + "ssm_conv1d.weight", rand(conv_dim, d_conv, std=d_conv ** -0.5))
        w.add_tensor(p + "ssm_conv1d.bias", rand(conv_dim, std=0.1))
        w.add_tensor(p + "ssm_dt.bias", rand(n_head, std=0.5, mean=-2.0))
        w.add_tensor(p + "ssm_a", -np.exp(rand(n_head, 1, std=0.5)))  # A = -exp(A_log)
        w.add_tensor(p + "ssm_d", np.ones((n_head, 1), np.float32))
        w.add_tensor(p + "ssm_norm.weight", np.ones((n_group, d_inner // n_group), np.float32))
        w.add_tensor(p + "ssm_out.weight", linear(rand, n_embd, d_inner))
