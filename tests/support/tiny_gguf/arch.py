"""write_tiny: a tiny random-weight GGUF of one llama.cpp architecture (ARCHS), and the sets
of them the tests and scripts use. The dense and sliding-window and MoE bodies are here; the
recurrent ones (qwen35, mamba2) are in recurrent.py.

Every file: F16 token embedding and an untied F16 output head (151,936 x 32 each with
Qwen2.5's vocabulary: 19.4 MB of a ~25.5 MB file, the tokenizer is most of the rest), F32
elsewhere, n_embd 32 unless asked. Weights come from `seed` in a fixed order: token
embedding, output head, then the layers (layers.make_rand).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .layers import Rand, attention, attention_heads, linear, load_gguf, make_rand, ones, swiglu_ffn
from .recurrent import mamba2, qwen35
from .vocab import CHATML_TEMPLATE, QWEN3_TEMPLATE, Tokenizer, write_tokenizer

if TYPE_CHECKING:
    from gguf import GGUFWriter

ARCHS = ("qwen3", "qwen35", "mamba2", "gemma3", "qwen3moe")
# the memory kinds besides a plain KV cache: hybrid, recurrent, sliding window, MoE
MEMORY_ARCHS = ("qwen35", "mamba2", "gemma3", "qwen3moe")

# relative weight noise for a near-copy draft that agrees with its target part of the time
DRAFT_NOISE = 0.05


def write_tiny(
    path: Path,
    arch: str,
    tok: Tokenizer,
    *,
    seed: int = 0,
    noise: float = 0.0,
    noise_seed: int = 1,
    n_embd: int = 32,
    n_vocab: int | None = None,
    template: str | None = None,
    sampling: dict[str, float] | None = None,
    nextn: int = 0,
    n_swa: int = 8,
    echo: float | None = None,
) -> Path:
    """Write a random-weight GGUF of llama.cpp architecture `arch` (one of ARCHS) to `path`.

    `seed` picks the weights; `noise` > 0 adds `noise` x (each tensor's std) Gaussian noise
    drawn from `noise_seed`, making a near-copy draft of the `seed` file (DRAFT_NOISE = 0.05
    agrees with the target on ~50-80% of greedy tokens). `n_vocab` < len(tok.tokens) drops
    trailing (padding) tokens: two such files differ only by padding, like Qwen2.5's 151,936
    vs 152,064. `template`: the chat template (default: Qwen3's for qwen3, else ChatML).
    `sampling` writes llama.cpp's general.sampling.* keys (temp, top_k, top_p, min_p).
    `nextn` (qwen35 only, 0 or 1) appends that many MTP/nextn blocks; `echo` (with nextn=1)
    makes a target whose MTP block guesses right part of the time (see recurrent.qwen35).
    `n_swa` is gemma3's sliding window in tokens. `n_embd` must be a multiple of 16.
    Returns `path`.
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

    gguf = load_gguf()
    rand = make_rand(seed, noise, noise_seed)
    n_vocab = n_vocab or len(tok.tokens)
    if template is None:
        template = QWEN3_TEMPLATE if arch == "qwen3" else CHATML_TEMPLATE
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}-seed{seed}")
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    write_tokenizer(w, tok, n_vocab, template)
    for key, value in (sampling or {}).items():
        getattr(w, f"add_sampling_{key}")(value)

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd, std=1.0).astype(np.float16))
    w.add_tensor("output_norm.weight", ones(n_embd))
    # an untied random head: with tied embeddings a random model just repeats its last token
    w.add_tensor("output.weight", rand(n_vocab, n_embd, std=0.5).astype(np.float16))

    if arch == "qwen3":
        _qwen3(w, rand, n_embd)
    elif arch == "qwen35":
        qwen35(w, rand, n_embd, nextn, echo)
    elif arch == "mamba2":
        mamba2(w, rand, n_embd)
    elif arch == "gemma3":
        _gemma3(w, rand, n_embd, n_swa)
    else:
        _qwen3moe(w, rand, n_embd)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_memory_kinds(d: Path, tok: Tokenizer, archs: tuple[str, ...] = MEMORY_ARCHS, *,
                       mtp_echo: float | None = None) -> dict[str, Path]:
    """Per arch in `archs` a target ARCH.gguf (seed 0) and its near-copy draft ARCH-draft.gguf
    (noise DRAFT_NOISE), and qwen35-mtp.gguf: the qwen35 trunk with one MTP block (`echo`
    mtp_echo). Returns {"ARCH": path, "ARCH-draft": path, "qwen35-mtp": path}."""
    d.mkdir(parents=True, exist_ok=True)
    files = {}
    for arch in archs:
        files[arch] = write_tiny(d / f"{arch}.gguf", arch, tok, seed=0)
        files[arch + "-draft"] = write_tiny(d / f"{arch}-draft.gguf", arch, tok, seed=0, noise=DRAFT_NOISE)
    files["qwen35-mtp"] = write_tiny(d / "qwen35-mtp.gguf", "qwen35", tok, seed=0, nextn=1, echo=mtp_echo)
    return files


def _qwen3(w: GGUFWriter, rand: Rand, n_embd: int) -> None:
    """Qwen3 (llama.cpp src/models/qwen3.cpp): 2 dense layers, q/k norms, SwiGLU FFN."""
    n_layer, n_head, n_head_kv, head_dim, n_ff = 2, 2, 1, 16, 64
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    attention_heads(w, n_head, n_head_kv, head_dim)
    w.add_rope_freq_base(1_000_000.0)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(n_embd))
        attention(w, rand, p, n_embd, n_head, n_head_kv, head_dim)
        w.add_tensor(p + "ffn_norm.weight", ones(n_embd))
        swiglu_ffn(w, rand, p, n_embd, n_ff)


def _gemma3(w: GGUFWriter, rand: Rand, n_embd: int, n_swa: int) -> None:
    """Gemma3 (llama.cpp src/models/gemma3.cpp): 2 sliding-window layers + 1 global."""
    n_layer, pattern = 3, 3  # llama.cpp: layer il is local iff il % pattern < pattern - 1
    n_head, n_head_kv, head_dim, n_ff = 2, 1, 16, 64
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    attention_heads(w, n_head, n_head_kv, head_dim, rope_dims=False)
    w.add_rope_freq_base(1_000_000.0)
    w.add_sliding_window(n_swa)
    w.add_sliding_window_pattern(pattern)
    # norms are stored as llama.cpp reads them (Gemma's 1 + w already folded in)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(n_embd))
        attention(w, rand, p, n_embd, n_head, n_head_kv, head_dim)
        w.add_tensor(p + "post_attention_norm.weight", ones(n_embd))
        w.add_tensor(p + "ffn_norm.weight", ones(n_embd))
        swiglu_ffn(w, rand, p, n_embd, n_ff)
        w.add_tensor(p + "post_ffw_norm.weight", ones(n_embd))


def _qwen3moe(w: GGUFWriter, rand: Rand, n_embd: int) -> None:
    """Qwen3-MoE (llama.cpp src/models/qwen3moe.cpp): 2 layers of 4 experts, 2 used."""
    n_layer, n_head, n_head_kv, head_dim = 2, 2, 1, 16
    n_expert, n_expert_used, n_ff_exp = 4, 2, 32
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff_exp * n_expert_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_expert_used)
    attention_heads(w, n_head, n_head_kv, head_dim)
    w.add_rope_freq_base(1_000_000.0)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(n_embd))
        attention(w, rand, p, n_embd, n_head, n_head_kv, head_dim)
        w.add_tensor(p + "ffn_norm.weight", ones(n_embd))
        w.add_tensor(p + "ffn_gate_inp.weight", linear(rand, n_expert, n_embd))
        w.add_tensor(p + "ffn_gate_exps.weight", rand(n_expert, n_ff_exp, n_embd, std=n_embd ** -0.5))
        w.add_tensor(p + "ffn_up_exps.weight", rand(n_expert, n_ff_exp, n_embd, std=n_embd ** -0.5))
        w.add_tensor(p + "ffn_down_exps.weight", rand(n_expert, n_embd, n_ff_exp, std=n_ff_exp ** -0.5))
