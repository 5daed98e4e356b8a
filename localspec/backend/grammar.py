"""A model's vocabulary as llguidance sees it: the one place constraints touch llama.cpp.

Constrained decoding (localspec/constrain/) needs llguidance's view of the vocabulary, an
`LLTokenizer`: every token's bytes, which tokens are special, and a tokenize function for
the bytes a grammar forces. Building one walks the whole vocabulary through ctypes
(`llguidance.llamacpp.lltokenizer_from_vocab`): 0.6 s for SmolLM2's 49,152 tokens, 2.2 s for
Qwen's 151,936. A grammar, a schema or a request does not change it, so it is built once per
model file per process and kept in a dict keyed by the file's path: every constrained request
after the first, and every session that loads the same file again, gets it for free.

The tokenizer keeps a raw `llama_vocab *` (llguidance calls llama.cpp's `llama_tokenize`
through it when it tokenizes forced text). The vocabulary of a `Model` lives only as long as
that model (runtime.py and cli/interrupt.py close models), so a tokenizer built on it would
outlive it in the cache and call into freed memory. The cache therefore loads the file once
more, vocabulary only (no weights: 0.2 s for SmolLM2, 0.7 s for Qwen, a few MB), and builds
the tokenizer on that vocabulary, which it owns and never frees. Same file, same tokens.

The tokenizer's EOS set is every end-of-generation id (`eog_ids`): a chat model ends a turn
with `<|im_end|>`, which is not necessarily the vocabulary's EOS, and a grammar's end must
be reachable through whichever of them the model samples.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import llama_cpp

if TYPE_CHECKING:
    import llguidance

    from localspec.backend.model import Model

_lock = threading.Lock()
# path -> (vocab-only llama_model pointer, kept alive for the tokenizer; the tokenizer)
_tokenizers: dict[str, tuple[object, llguidance.LLTokenizer]] = {}
_eogs: dict[str, list[int]] = {}


def _key(model: Model) -> str:
    return str(Path(model.path).resolve())


def _eog_ids_of(vocab: object, n_vocab: int) -> list[int]:
    return [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)]


def eog_ids(model: Model) -> list[int]:
    """Every end-of-generation token id of the model (llama_vocab_is_eog over the vocabulary:
    EOS, EOT, `<|im_end|>`, `<|endoftext|>`, ...), ascending; cached per file (one ctypes call
    per token, ~50 ms on 152k tokens). `Model.is_eog` answers one id; this lists them all."""
    key = _key(model)
    got = _eogs.get(key)
    if got is None:
        got = _eogs[key] = _eog_ids_of(model.vocab, model.n_vocab)
    return list(got)


def ll_tokenizer(model: Model) -> llguidance.LLTokenizer:
    """llguidance's tokenizer for the model's vocabulary, its EOS set = `eog_ids(model)`.

    Cached per model file path for the life of the process: building it costs ~2 s on a
    152k-token vocabulary and every grammar on this model reuses it (module docstring: why
    it is built on a vocabulary the cache loads and owns, not on `model.vocab`). Safe to
    share between threads (llguidance's tokenizer is immutable)."""
    key = _key(model)
    with _lock:
        got = _tokenizers.get(key)
        if got is None:
            got = _tokenizers[key] = _build(key, model.n_vocab)
        return got[1]


def _build(path: str, n_vocab: int) -> tuple[object, llguidance.LLTokenizer]:
    import llguidance.llamacpp

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    ptr = llama_cpp.llama_model_load_from_file(path.encode(), params)
    if not ptr:
        raise RuntimeError(f"llama.cpp could not load the vocabulary of {path} a second time")
    vocab = llama_cpp.llama_model_get_vocab(ptr)
    eog = _eog_ids_of(vocab, llama_cpp.llama_vocab_n_tokens(vocab))
    _eogs.setdefault(path, eog)
    # a vocabulary without any EOG id keeps llguidance's default (the vocabulary's EOS);
    # llguidance calls llama_token_get_attr, which llama-cpp-python 0.3.36 deprecates with a
    # DeprecationWarning per token (152k of them on Qwen): silenced, it is not ours to fix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tok = llguidance.llamacpp.lltokenizer_from_vocab(vocab, n_vocab=n_vocab, eos_token=eog or None)
    return ptr, tok
