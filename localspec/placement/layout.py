"""What a model costs in memory: bytes per layer (from its GGUF header), KV cache, buffers.

Apart from the planner (localspec.placement) because it is the model-side half: the
shape and sizes read from the file, and the estimates of what a context on it allocates
for a given --ctx and batch. Pure: no llama_cpp import.
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.errors import ConfigError
from localspec.models.gguf import GGUFInfo

KV_BYTES = 2  # an F16 K or V element (llama.cpp's default cache type)


class LayoutError(ConfigError):
    """A GGUF header without the shape keys the memory estimate needs."""


@dataclass(frozen=True)
class Layout:
    """A model's memory shape: bytes per layer and what its KV cache and buffers cost."""

    name: str
    n_layer: int
    layer_bytes: tuple[int, ...]
    input_bytes: int
    output_bytes: int  # output norm + head (the tied embedding's copy when it has none)
    kv_bytes_per_token: int  # per layer: K + V of one token at F16
    n_embd: int
    n_ff: int
    n_head: int
    n_vocab: int
    n_ctx_train: int = 4096  # what --ctx 0 means

    @property
    def weights(self) -> int:
        return self.input_bytes + sum(self.layer_bytes) + self.output_bytes

    def layer_weight(self, il: int) -> int:
        """Bytes of layer il, il == n_layer being the output layer."""
        return self.output_bytes if il == self.n_layer else self.layer_bytes[il]

    @classmethod
    def from_header(cls, info: GGUFInfo) -> Layout:
        """From a read_header() result: layer bytes from the tensor table, shape from metadata."""
        arch = info.architecture
        meta = info.metadata

        def get(key: str, default: int | None = None) -> int:
            v = meta.get(f"{arch}.{key}", default)
            if v is None:
                raise LayoutError(f"{info.path.name}: no {arch}.{key} in its GGUF header; cannot plan "
                                     "its placement (pass -ngl N explicitly)")
            return int(v)  # type: ignore[arg-type]

        n_layer = get("block_count")
        layers = [0] * n_layer
        input_bytes = output_bytes = embd_bytes = 0
        has_head = False
        for t in info.tensors:
            parts = t.name.split(".")
            if parts[0] == "blk" and len(parts) > 1 and parts[1].isdigit():
                il = int(parts[1])
                if il < n_layer:
                    layers[il] += t.nbytes
                else:  # next-token-prediction layers beyond block_count go with the output
                    output_bytes += t.nbytes
            elif parts[0] == "output" or parts[0] == "output_norm":
                output_bytes += t.nbytes
                has_head = has_head or t.name == "output.weight"
            else:
                input_bytes += t.nbytes
                if t.name == "token_embd.weight":
                    embd_bytes = t.nbytes
        if not has_head:  # tied embeddings: llama.cpp duplicates token_embd on the output device
            output_bytes += embd_bytes
        n_embd = get("embedding_length")
        n_head = get("attention.head_count", max(1, n_embd // 128))
        n_head_kv = get("attention.head_count_kv", n_head)
        head_k = get("attention.key_length", n_embd // max(n_head, 1))
        head_v = get("attention.value_length", head_k)
        vocab = meta.get(f"{arch}.vocab_size") or info.arrays.get("tokenizer.ggml.tokens", 32000)
        return cls(
            name=info.path.name, n_layer=n_layer, layer_bytes=tuple(layers),
            input_bytes=input_bytes, output_bytes=output_bytes,
            kv_bytes_per_token=n_head_kv * (head_k + head_v) * KV_BYTES,
            n_embd=n_embd, n_ff=get("feed_forward_length", 4 * n_embd), n_head=n_head,
            n_vocab=int(vocab),  # type: ignore[arg-type]
            n_ctx_train=get("context_length", 4096),
        )


@dataclass(frozen=True)
class Need:
    """What a context will ask of memory: cells of KV, the batch, flash attention.

    n_seq_max does not multiply the KV cache: localspec's contexts use one unified KV of
    n_ctx cells shared by every sequence (drafts and PARSE copies share their prefix), so
    it is kept only to be reported.
    """

    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    n_seq_max: int = 1
    flash_attn: str = "auto"
    kv_offload: bool = True


def n_ctx_of(layout: Layout, need: Need) -> int:
    """Cells of the context (--ctx 0 = the model's training context, as llama.cpp does)."""
    return need.n_ctx or layout.n_ctx_train


def kv_bytes(layout: Layout, need: Need) -> int:
    """KV cache of one layer for the whole context."""
    return n_ctx_of(layout, need) * layout.kv_bytes_per_token


def compute_bytes(layout: Layout, need: Need, *, output: bool) -> int:
    """Estimated compute buffer of one device that runs some layers (F32 activations).

    ggml's allocator reuses memory across the graph, so the buffer is about its largest
    tensor plus the hidden state: the attention scores (ubatch x n_ctx x heads; none with
    flash attention on), the FFN's intermediates, or the logits when the device holds the
    output layer. Checked against llama.cpp's reported 304 MiB for a 7B at ctx 4096.
    """
    ub = need.n_ubatch
    attn = 0 if need.flash_attn == "on" else 4 * ub * n_ctx_of(layout, need) * layout.n_head
    ffn = 4 * ub * layout.n_ff * 2
    logits = 4 * ub * layout.n_vocab if output else 0
    return max(attn, ffn, logits) + 4 * ub * layout.n_embd * 4
