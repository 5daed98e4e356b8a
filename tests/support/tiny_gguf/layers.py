"""The gguf import and the weight builders the tiny architectures share.

Every weight comes from one `Rand` (make_rand): draws from the file's seed in the order the
writer asks for them, so the order of `rand` calls in an architecture's writer is part of the
file's meaning (the same seed must keep giving the same weights: tests compare outputs).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gguf import GGUFWriter

Rand = Callable[..., np.ndarray]


def load_gguf():
    """The gguf package. It imports yaml for model cards only, which no writer here needs: a
    Python without PyYAML gets an empty stand-in (the offline GPU check's bare interpreter)."""
    try:
        import gguf
    except ImportError as e:
        if "yaml" not in str(e):
            raise
        sys.modules["yaml"] = types.ModuleType("yaml")
        import gguf
    return gguf


def make_rand(seed: int, noise: float = 0.0, noise_seed: int = 1) -> Rand:
    """rand(*shape, std, mean=0): float32 N(mean, std^2) from `seed`; `noise` > 0 adds
    noise x std Gaussian noise drawn from `noise_seed` (a near-copy of the `seed` weights)."""
    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng(noise_seed)

    def rand(*shape: int, std: float, mean: float = 0.0) -> np.ndarray:
        x = rng.standard_normal(shape)
        if noise:
            x += noise * noise_rng.standard_normal(shape)
        return (mean + x * std).astype(np.float32)

    return rand


def linear(rand: Rand, n_out: int, n_in: int) -> np.ndarray:
    """A weight of ggml shape {n_in, n_out} (numpy (n_out, n_in)), std 1/sqrt(n_in)."""
    return rand(n_out, n_in, std=n_in ** -0.5)


def ones(n: int) -> np.ndarray:
    return np.ones(n, np.float32)


def attention(w: GGUFWriter, rand: Rand, p: str, n_embd: int, n_head: int, n_head_kv: int,
              head_dim: int, *, q_gate: bool = False, out: float = 1.0) -> None:
    """Attention with q/k norms: q, k, v, output (scaled by `out`), the two norms. `q_gate`
    (qwen35) doubles the q projection: it carries q and its output gate."""
    w.add_tensor(p + "attn_q.weight", linear(rand, (2 if q_gate else 1) * n_head * head_dim, n_embd))
    w.add_tensor(p + "attn_k.weight", linear(rand, n_head_kv * head_dim, n_embd))
    w.add_tensor(p + "attn_v.weight", linear(rand, n_head_kv * head_dim, n_embd))
    w.add_tensor(p + "attn_output.weight", out * linear(rand, n_embd, n_head * head_dim))
    w.add_tensor(p + "attn_q_norm.weight", ones(head_dim))
    w.add_tensor(p + "attn_k_norm.weight", ones(head_dim))


def swiglu_ffn(w: GGUFWriter, rand: Rand, p: str, n_embd: int, n_ff: int, down: float = 1.0) -> None:
    w.add_tensor(p + "ffn_gate.weight", linear(rand, n_ff, n_embd))
    w.add_tensor(p + "ffn_up.weight", linear(rand, n_ff, n_embd))
    w.add_tensor(p + "ffn_down.weight", down * linear(rand, n_embd, n_ff))


def attention_heads(w: GGUFWriter, n_head: int, n_head_kv: int, head_dim: int, *,
                    rope_dims: bool = True) -> None:
    """The attention keys the tiny architectures share: head counts and head sizes."""
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    if rope_dims:
        w.add_rope_dimension_count(head_dim)
