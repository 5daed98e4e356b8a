"""What a model keeps between tokens, and which sequence operations that memory allows.

localspec's fast path assumes attention KV: every position is a cell, so a rejected draft
is dropped with `seq_rm` of its span and a branch is shared with `seq_cp`. The models people
run in 2026 are often hybrid (Qwen3.5/3.6, Qwen3-Next, Nemotron-H, Granite-hybrid, LFM2) or
purely recurrent (Mamba): their recurrent layers keep ONE state per sequence, overwritten by
every token. There, removing the tail of a sequence is only possible through llama.cpp's
per-token snapshots of the latest decode (`n_rs_seq`, not every architecture), and `seq_cp`
copies a whole state (copy on write at the next decode), never a span. Sliding-window
models (Gemma 3) keep attention KV but may reuse the cells of positions that fell out of the
window, so reusing an old prefix needs a check.

`Memory` names the kind; the decoding state (decode/state.py) keeps its invariant per kind.
"""

from __future__ import annotations

from enum import Enum

import llama_cpp

# recurrent-state snapshots per sequence (llama.cpp's n_rs_seq): a draft block of up to this
# many tokens is rolled back in place after a partial acceptance. 16 is llama.cpp's default
# draft n_max and the longest draft auto chooses outside a long copy; longer blocks (auto's
# bets inside a copy: up to 31, costmodel/lookup.LOOKUP_LONG_L) take the branch path.
RS_SNAPSHOTS = 16


class Memory(Enum):
    """The memory kind of a model, as llama.cpp reports it."""

    ATTENTION = "attention"
    SLIDING_WINDOW = "sliding-window"
    RECURRENT = "recurrent"
    HYBRID = "hybrid"

    @property
    def has_state(self) -> bool:
        """Whether some layers keep a recurrent state (one per sequence, not per position)."""
        return self in (Memory.RECURRENT, Memory.HYBRID)

    @property
    def attends(self) -> bool:
        """Whether some layers attend over every position held, so that a decode costs more
        the longer the context (a recurrent state's step costs the same at any length: the
        cost model prices no place for it, costmodel/span.py)."""
        return self is not Memory.RECURRENT

    def allows(self) -> str:
        """What this memory allows, in one phrase (--explain, refusals)."""
        if self.has_state:
            return ("one draft at a time (a recurrent state cannot be shared by a draft tree); "
                    "rollback by state snapshots, else by a branch copy")
        if self is Memory.SLIDING_WINDOW:
            return "every method; a reused prefix is checked against the window"
        return "every method"


def memory_of(model_ptr) -> Memory:
    """The kind of a loaded llama_model."""
    if llama_cpp.llama_model_is_hybrid(model_ptr):
        return Memory.HYBRID
    if llama_cpp.llama_model_is_recurrent(model_ptr):
        return Memory.RECURRENT
    if llama_cpp.llama_model_n_swa(model_ptr) > 0:
        return Memory.SLIDING_WINDOW
    return Memory.ATTENTION
