#!/usr/bin/env python3
"""Write a random-weight GGUF of a real model's shape (Qwen2.5 0.5B / 1.5B / 7B), no download.

Why: the GPU check runs on a machine without network, and what it measures (where layers
go, decode cost per batch size, greedy equality of speculative and plain decoding on the
GPU) depends on the model's shape and quantization, not on trained weights. Weights are
Q4_0 blocks with random nibbles and a scale that keeps activations near unit size, so the
logits are spread (greedy near-ties are rare). All shapes share one synthetic
SentencePiece-style vocabulary (byte tokens + placeholders), so any two form a valid
target/draft pair. Tensors are streamed to the file one at a time (a 7B needs no 4 GB of
RAM).

    python3 scripts/gpu_check_gguf.py OUT.gguf --shape qwen2.5-1.5b [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import types

import numpy as np

try:
    import gguf
except ImportError as e:  # gguf imports yaml for model cards only; the writer does not need it
    if "yaml" not in str(e):
        raise
    sys.modules["yaml"] = types.ModuleType("yaml")
    import gguf

# name: (n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, tied embeddings)
SHAPES = {
    "tiny": (64, 2, 4, 2, 128, 512, True),
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936, True),
    "qwen2.5-1.5b": (1536, 28, 12, 2, 8960, 151936, True),
    "qwen2.5-7b": (3584, 28, 28, 4, 18944, 152064, False),
}
Q4_0 = gguf.GGMLQuantizationType.Q4_0
QK = 32  # weights per Q4_0 block; a block is an f16 scale + 16 bytes of nibbles
NIBBLE_STD = float(np.sqrt(np.mean((np.arange(16) - 8.0) ** 2)))


def vocab(n: int) -> tuple[list[str], list[float], list[int]]:
    """<unk> <s> </s>, the 256 byte tokens, then placeholders: a vocabulary llama.cpp loads."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types_ = [2, 3, 3] + [6] * 256  # unknown, control, control, byte
    tokens += [f"\u2581w{i}" for i in range(n - len(tokens))]
    types_ += [1] * (n - len(types_))
    scores = [0.0] * 259 + [-float(i) for i in range(n - 259)]
    return tokens, scores, types_


def q4_0(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Random Q4_0 bytes for a (rows, cols) weight whose values have about this std."""
    nb = cols // QK
    out = np.empty((rows, nb, 18), dtype=np.uint8)
    out[:, :, :2] = np.frombuffer(np.float16(std / NIBBLE_STD).tobytes(), dtype=np.uint8)
    out[:, :, 2:] = rng.integers(0, 256, size=(rows, nb, 16), dtype=np.uint8)
    return out.reshape(rows, nb * 18)


def tensors(shape: tuple, rng: np.random.Generator):
    """(name, array, raw_dtype) in llama.cpp's qwen2 naming, generated lazily."""
    n_embd, n_layer, n_head, n_kv, n_ff, n_vocab, tied = shape
    hd = n_embd // n_head
    kv = n_kv * hd
    f32 = np.float32
    # std 3/sqrt(n_embd): as the tied output head it gives logits of std ~3 (spread, few ties)
    yield "token_embd.weight", lambda: q4_0(rng, n_vocab, n_embd, 3.0 * n_embd ** -0.5), Q4_0
    for i in range(n_layer):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", lambda: np.ones(n_embd, f32), None
        for name, rows in (("attn_q", n_embd), ("attn_k", kv), ("attn_v", kv)):
            yield b + name + ".weight", lambda rows=rows: q4_0(rng, rows, n_embd, n_embd ** -0.5), Q4_0
            yield b + name + ".bias", lambda rows=rows: (rng.standard_normal(rows) * 0.02).astype(f32), None
        yield b + "attn_output.weight", lambda: q4_0(rng, n_embd, n_embd, n_embd ** -0.5), Q4_0
        yield b + "ffn_norm.weight", lambda: np.ones(n_embd, f32), None
        yield b + "ffn_gate.weight", lambda: q4_0(rng, n_ff, n_embd, n_embd ** -0.5), Q4_0
        yield b + "ffn_up.weight", lambda: q4_0(rng, n_ff, n_embd, n_embd ** -0.5), Q4_0
        yield b + "ffn_down.weight", lambda: q4_0(rng, n_embd, n_ff, n_ff ** -0.5), Q4_0
    yield "output_norm.weight", lambda: np.ones(n_embd, f32), None
    if not tied:
        yield "output.weight", lambda: q4_0(rng, n_vocab, n_embd, 3.0 * n_embd ** -0.5), Q4_0


def write(path: str, shape_name: str, seed: int = 0) -> None:
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
    toks, scores, ttypes = vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(ttypes)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    rng = np.random.default_rng(seed)
    plan = list(tensors(shape, rng))
    for name, _make, raw in plan:  # the tensor table first: shapes without generating data
        n_el = _elements(name, shape)
        if raw is None:
            w.add_tensor_info(name, n_el, np.dtype(np.float32), int(np.prod(n_el)) * 4)
        else:
            rows, cols = n_el
            w.add_tensor_info(name, (rows, cols // QK * 18), np.dtype(np.uint8), rows * cols // QK * 18,
                              raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, make, _ in plan:
        w.write_tensor_data(make())
    w.close()


def _elements(name: str, shape: tuple) -> tuple[int, ...]:
    n_embd, _, n_head, n_kv, n_ff, n_vocab, _ = shape
    kv = n_kv * (n_embd // n_head)
    part = name.split(".")[-2] if name.startswith("blk.") else name.split(".")[0]
    if name.endswith(".bias"):
        return (n_embd if part == "attn_q" else kv,)
    return {
        "token_embd": (n_vocab, n_embd), "output": (n_vocab, n_embd), "output_norm": (n_embd,),
        "attn_norm": (n_embd,), "ffn_norm": (n_embd,), "attn_q": (n_embd, n_embd),
        "attn_k": (kv, n_embd), "attn_v": (kv, n_embd), "attn_output": (n_embd, n_embd),
        "ffn_gate": (n_ff, n_embd), "ffn_up": (n_ff, n_embd), "ffn_down": (n_embd, n_ff),
    }[part]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    write(a.out, a.shape, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
