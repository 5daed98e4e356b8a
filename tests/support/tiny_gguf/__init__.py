"""Tiny random-weight GGUFs: the one writer behind every test and script that needs a model
file of some llama.cpp architecture or shape without downloading weights.

Speculative decoding must treat a model by the kind of memory its context keeps: a plain KV
cache (rewind by removing positions), a sliding-window cache (positions older than the window
are gone), a recurrent state (no per-position history: rollback needs snapshots, llama.cpp's
`n_rs_seq`, or a re-decode) or a hybrid of recurrent and attention layers; thinking models
need Qwen3's vocabulary and template; the GPU check needs real models' shapes. No such
weights are reachable offline, and the tests need only the architecture (so llama.cpp builds
that arch's graph and memory), a vocabulary and a template, not sensible text.

- `write_tiny(path, arch, tok, ...)` (arch.py, recurrent.py): random F16/F32 weights, one
  of ARCHS; llama_model_is_recurrent / llama_model_is_hybrid in brackets:
  - "qwen3": 2 dense layers, Qwen3's chat template (QWEN3_TEMPLATE) unless told otherwise.
  - "qwen35": Qwen3.5's hybrid (hybrid). 3 gated-delta-net layers + 1 full attention;
    `nextn=1` appends an MTP block, `echo` makes one the target partly agrees with. llama.cpp
    supports recurrent rollback (`n_rs_seq`) for this arch; measured: rolling back r tokens
    with seq_rm gives the right state for r < the length of the last decoded batch, while r
    equal to it (all of that batch) returns true but leaves a wrong state.
  - "mamba2": pure Mamba2 (recurrent). 2 layers, d_inner 64, d_state 128 (the sizes Vulkan's
    ssm_scan accepts), 4 heads of 16, 1 group, conv 4. llama.cpp clamps `n_rs_seq` to 0.
  - "gemma3": Gemma3 (neither). 3 layers, sliding window `n_swa` on layers 0 and 1
    (`sliding_window_pattern` 3), q/k norms. llama.cpp's default context keeps a full-size
    SWA cache (`swa_full`); set it false for the window to drop old positions.
  - "qwen3moe": Qwen3-MoE (neither). 2 layers, 4 experts of width 32, 2 used per token.
  `write_memory_kinds(dir, tok)` writes the targets, near-copy drafts and MTP file the memory
  tests, scripts/write_tiny_models.py and the GPU check use.
- `write_shape(path, shape, seed)` (shapes.py): a Q4_0 qwen2 GGUF of a Qwen2.5 shape (SHAPES)
  with a synthetic vocabulary, streamed; scripts/gpu_check_gguf.py is its command line.
- vocabularies (vocab.py): `read_qwen25_tokenizer` (Qwen2.5's tokenizer from the cached
  0.5B GGUF with Qwen3's <think> tokens), `byte_tokenizer` (259 tokens, no file needed).

A draft for a target is `write_tiny(..., seed=<the target's seed>, noise=DRAFT_NOISE)`: the
same weights plus relative Gaussian noise, so the draft's greedy token agrees with the
target's on part (not all) of the positions. Measured with llama-cpp-python 0.3.36 on CPU
(seed 0, noise_seed 1; the draft's argmax on the target's own 40 greedy tokens after three
short prompts), the agreement at noise 0.05 was qwen3 0.74, qwen35 0.53, mamba2 0.68,
gemma3 0.78, qwen3moe 0.70 (at 0.02: 0.72..0.90; at 0.1: 0.23..0.61). Free-running greedy
generations of target and draft part within the first few tokens. Adding an MTP block
(nextn=1) leaves the trunk's weights and outputs as they are for the same seed. write_tiny
takes ~0.6 s; reading the tokenizer (read_qwen25_tokenizer, ~7-10 s) is separate.

Lives in tests/support (not the localspec package: it is test scaffolding, and the gguf
package is a dev dependency); scripts put the checkout's root on sys.path to import it, and
the GPU check's bundle carries this folder (scripts/gpu_check.sh).
"""

from .arch import ARCHS, DRAFT_NOISE, MEMORY_ARCHS, write_memory_kinds, write_tiny
from .shapes import SHAPES, write_shape
from .vocab import (
    CHATML_TEMPLATE,
    OPEN_THINK_TEMPLATE,
    QWEN3_TEMPLATE,
    QWEN25_GGUF,
    Tokenizer,
    byte_tokenizer,
    read_qwen25_tokenizer,
)

__all__ = ["ARCHS", "CHATML_TEMPLATE", "DRAFT_NOISE", "MEMORY_ARCHS", "OPEN_THINK_TEMPLATE",
           "QWEN25_GGUF", "QWEN3_TEMPLATE", "SHAPES", "Tokenizer", "byte_tokenizer",
           "read_qwen25_tokenizer", "write_memory_kinds", "write_shape", "write_tiny"]
