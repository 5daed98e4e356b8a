"""write_shape: a random-weight Q4_0 GGUF of a real model's shape (Qwen2.5 0.5B / 1.5B / 7B).

Why: the GPU check runs on a machine without network, and what it measures (where layers
go, decode cost per batch size, greedy equality of speculative and plain decoding on the
GPU) depends on the model's shape and quantization, not on trained weights. Weights are
Q4_0 blocks with random nibbles and a scale that keeps activations near unit size, so the
logits are spread (greedy near-ties are rare). All shapes share one synthetic
SentencePiece-style vocabulary (vocab.spm_vocab), so any two form a valid target/draft
pair. Tensors are streamed to the file one at a time (a 7B needs no 4 GB of RAM).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .layers import load_gguf
from .vocab import write_spm_tokenizer

# name: (n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, tied embeddings)
SHAPES = {
    "tiny": (64, 2, 4, 2, 128, 512, True),
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936, True),
    "qwen2.5-1.5b": (1536, 28, 12, 2, 8960, 151936, True),
    "qwen2.5-7b": (3584, 28, 28, 4, 18944, 152064, False),
}
QK = 32  # weights per Q4_0 block; a block is an f16 scale + 16 bytes of nibbles
Q4_0_BLOCK = 18
NIBBLE_STD = float(np.sqrt(np.mean((np.arange(16) - 8.0) ** 2)))


def q4_0(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Random Q4_0 bytes for a (rows, cols) weight whose values have about this std."""
    nb = cols // QK
    out = np.empty((rows, nb, Q4_0_BLOCK), dtype=np.uint8)
    out[:, :, :2] = np.frombuffer(np.float16(std / NIBBLE_STD).tobytes(), dtype=np.uint8)
    out[:, :, 2:] = rng.integers(0, 256, size=(rows, nb, 16), dtype=np.uint8)
    return out.reshape(rows, nb * Q4_0_BLOCK)


def plan(shape: tuple) -> Iterator[tuple[str, tuple[int, ...], str, float]]:
    """(name, numpy shape, kind, std) per tensor in llama.cpp's qwen2 naming and file order.
    kind: "q4_0" (a weight of about that std), "bias" (F32, std 0.02), "norm" (F32 ones)."""
    n_embd, n_layer, n_head, n_kv, n_ff, n_vocab, tied = shape
    kv = n_kv * (n_embd // n_head)
    # std 3/sqrt(n_embd): as the tied output head it gives logits of std ~3 (spread, few ties)
    yield "token_embd.weight", (n_vocab, n_embd), "q4_0", 3.0 * n_embd ** -0.5
    for i in range(n_layer):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (n_embd,), "norm", 1.0
        for name, rows in (("attn_q", n_embd), ("attn_k", kv), ("attn_v", kv)):
            yield b + name + ".weight", (rows, n_embd), "q4_0", n_embd ** -0.5
            yield b + name + ".bias", (rows,), "bias", 0.02
        yield b + "attn_output.weight", (n_embd, n_embd), "q4_0", n_embd ** -0.5
        yield b + "ffn_norm.weight", (n_embd,), "norm", 1.0
        yield b + "ffn_gate.weight", (n_ff, n_embd), "q4_0", n_embd ** -0.5
        yield b + "ffn_up.weight", (n_ff, n_embd), "q4_0", n_embd ** -0.5
        yield b + "ffn_down.weight", (n_embd, n_ff), "q4_0", n_ff ** -0.5
    yield "output_norm.weight", (n_embd,), "norm", 1.0
    if not tied:
        yield "output.weight", (n_vocab, n_embd), "q4_0", 3.0 * n_embd ** -0.5


def write_shape(path: str, shape_name: str, seed: int = 0) -> None:
    """Write a random qwen2 GGUF of SHAPES[shape_name] to `path` (weights from `seed`)."""
    gguf = load_gguf()
    shape = SHAPES[shape_name]
    n_embd, n_layer, n_head, n_kv, n_ff, n_vocab, _ = shape
    w = gguf.GGUFWriter(path, "qwen2")
    w.add_name(f"random {shape_name} (localspec gpu check)")
    w.add_context_length(32768)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    write_spm_tokenizer(w, n_vocab)
    tensors = list(plan(shape))
    for name, dims, kind, _ in tensors:  # the tensor table first: shapes without generating data
        if kind != "q4_0":
            w.add_tensor_info(name, dims, np.dtype(np.float32), int(np.prod(dims)) * 4)
        else:
            rows, cols = dims
            n_bytes = cols // QK * Q4_0_BLOCK
            w.add_tensor_info(name, (rows, n_bytes), np.dtype(np.uint8), rows * n_bytes,
                              raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _, dims, kind, std in tensors:
        if kind == "norm":
            data = np.ones(dims, np.float32)
        elif kind == "bias":
            data = (rng.standard_normal(dims) * std).astype(np.float32)
        else:
            data = q4_0(rng, *dims, std)
        w.write_tensor_data(data)
    w.close()
