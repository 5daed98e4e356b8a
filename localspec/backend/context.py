"""A llama.cpp context: multi-sequence KV (unified), checked seq ops, logits as numpy views.

A sequence operation llama.cpp refuses (`llama_memory_seq_rm` returns False: a recurrent
state cannot lose a span beyond its snapshots) raises SeqOpError naming the model and the
operation; nothing continues on a state that is not what the caller believes.

Logits views stay valid only until the next decode on this context: callers read what they
need (argmaxes, sparse rows) before decoding again; nothing copies whole 600 KB rows.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import llama_cpp
import numpy as np

from localspec.backend.batch import Batch
from localspec.backend.devices import repack_on
from localspec.backend.logs import raise_pending
from localspec.backend.memory import RS_SNAPSHOTS, Memory
from localspec.backend.model import Model
from localspec.errors import (
    ConfigError,
    ContextFullError,
    DecodeAborted,
    LocalspecError,
    SeqOpError,
)
from localspec.placement.load import LoadOptions


def default_threads() -> int:
    """Physical-ish core count: llama.cpp is memory bound, more threads rarely help."""
    n = os.cpu_count() or 2
    return max(1, min(n, 8))


FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}  # enum llama_flash_attn_type


def context_params(
    load: LoadOptions,
    *,
    n_ctx: int,
    n_batch: int,
    n_ubatch: int | None,
    n_seq_max: int,
    threads: int,
    n_rs_seq: int = 0,
):
    """llama_context_params for a context on a model loaded with `load` (no llama.cpp call
    that allocates: tests inspect what reaches llama.cpp)."""
    if load.flash_attn not in FLASH_ATTN:
        raise ConfigError(f"-fa/--flash-attn {load.flash_attn}: use auto, on or off")
    p = llama_cpp.llama_context_default_params()
    p.n_ctx = n_ctx
    p.n_batch = n_batch
    p.n_ubatch = n_ubatch or n_batch
    p.n_seq_max = n_seq_max
    p.n_threads = threads
    p.n_threads_batch = threads
    p.kv_unified = True
    p.no_perf = True
    p.flash_attn_type = FLASH_ATTN[load.flash_attn]
    p.offload_kqv = load.kv_offload
    p.op_offload = load.op_offload
    p.n_rs_seq = n_rs_seq  # llama.cpp clamps it to 0 for archs without snapshot rollback
    return p


@functools.cache
def _strlen_callback() -> object:
    """libc's strlen as a ggml_abort_callback: 0 (go on) on b"\\0\\0", 1 (abort) on b"\\1\\0"."""
    libc = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
    return ctypes.cast(libc.strlen, llama_cpp.ggml_abort_callback)


class Context:
    """KV cache + compute for one model; counts decodes and evaluated tokens for tests."""

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_ubatch: int | None = None,
        n_seq_max: int = 16,
        threads: int | None = None,
        rs_snapshots: int = RS_SNAPSHOTS,
        n_slots: int = 1,
    ) -> None:
        if n_seq_max < 1 or n_seq_max > 256:
            raise ConfigError(f"n_seq_max must be in 1..256 (got {n_seq_max})")
        # llama.cpp reserves one output row per sequence in a buffer of min(n_batch, n_ctx)
        # rows and aborts the process (GGML_ASSERT n_outputs_max) when they do not fit.
        if n_ctx < 0 or 0 < n_ctx < n_seq_max:
            raise ConfigError(f"--ctx {n_ctx} is too small: at least {n_seq_max} (one output row per "
                              f"sequence; 0 = the model's training context)")
        if not 0 <= rs_snapshots <= 64:
            raise ConfigError(f"--rs-snapshots must be in 0..64 (got {rs_snapshots})")
        if n_batch < n_seq_max:
            raise ConfigError(f"--batch {n_batch} is too small: at least {n_seq_max} (llama.cpp reserves "
                              f"one output row per sequence and this context holds {n_seq_max})")
        # the model's own thread count (-t / -td) wins: target and draft may differ
        threads = model.load.threads or threads or default_threads()
        memory: Memory = getattr(model, "memory", Memory.ATTENTION)
        if memory.has_state:
            # one recurrent state per sequence: the main one and one branch (a draft block or
            # the cost model's scratch) are all localspec uses on such a model, per slot
            n_seq_max = min(n_seq_max, 2 * n_slots)
        p = context_params(model.load, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch,
                           n_seq_max=n_seq_max, threads=threads,
                           n_rs_seq=rs_snapshots if memory.has_state else 0)
        ptr = llama_cpp.llama_init_from_model(model.ptr, p)
        if not ptr:
            raise LocalspecError(f"llama.cpp could not create a context for {model.name} (n_ctx={n_ctx}); try a smaller --ctx")
        self.model = model
        self.ptr = ptr
        self.mem = llama_cpp.llama_get_memory(ptr)
        self.n_ctx = llama_cpp.llama_n_ctx(ptr)
        self.n_batch = int(llama_cpp.llama_n_batch(ptr))  # llama.cpp clamps n_batch to n_ctx
        self.n_seq_max = n_seq_max
        self.memory = memory
        # snapshots llama.cpp keeps per sequence (0: this arch cannot roll back a state)
        self.n_rs_seq = int(llama_cpp.llama_n_rs_seq(ptr)) if memory.has_state else 0
        # llama.cpp keeps a sequence's last 1 + n_rs_seq tokens in one ubatch (their
        # snapshots) and aborts the process at the first decode (GGML_ASSERT n_ubatch >
        # n_keep_tail) otherwise. Checked against what llama.cpp made of the request: it
        # clamps n_rs_seq to 0 on archs without snapshot rollback (mamba2), which any batch fits.
        ub = int(llama_cpp.llama_n_ubatch(ptr))
        if self.n_rs_seq and ub <= self.n_rs_seq + 1:
            llama_cpp.llama_free(ptr)
            raise ConfigError(f"--batch {ub} is too small for {model.name}'s recurrent state with "
                              f"--rs-snapshots {self.n_rs_seq}: use --batch {self.n_rs_seq + 2} or more, "
                              f"or --rs-snapshots {max(ub - 2, 0)} or fewer")
        self.threads = threads
        # (n tokens, seconds, first position) after each decode whose every row has logits
        self.on_decode: Callable[[int, float, int], None] | None = None
        self.span = 0  # the context's length after the last decode (the cost model prices at it)
        # the batch of every decode, once it succeeded (the MTP head reads the hidden rows)
        self.after_decode: Callable[[Batch], None] | None = None
        self.n_vocab = model.n_vocab
        self.batch = Batch(self.n_batch, n_seq_max)
        self.n_decodes = 0
        self.n_evaluated = 0
        self._n_outputs = 0
        self._view: np.ndarray | None = None
        raise_pending()  # a Ctrl-C the log callback kept while llama.cpp made it (logs.py)

    @property
    def placement_key(self) -> str:
        """Where this context computes, for cost-model cache keys: device names with their
        layer counts, flash attention, KV offload, op offload and weight repacking when off,
        and threads ('CPU:31|fa=auto|kvo=1|t=2').

        Curves timed on the CPU must never be used for a GPU placement (and vice versa)."""
        load = self.model.load
        pl = self.model.placement
        layers = pl.key if pl is not None else "CPU:?"
        if "RPC" in layers:  # RPC0 is whichever server registered first: name the servers
            from localspec.backend.rpc import registered

            layers += "|rpc=" + "+".join(registered())
        nopo = "" if load.op_offload else "|nopo"  # the default adds nothing: cached curves stay valid
        norp = "" if repack_on(load.repack) else "|norp"  # unrepacked quants decode at another speed
        return f"{layers}|fa={load.flash_attn}|kvo={int(load.kv_offload)}{nopo}{norp}|t={self.threads}"

    # ------------------------------------------------------------------ compute
    def decode(self, batch: Batch | None = None) -> None:
        """One llama_decode of the batch (the context's own reusable batch by default)."""
        b = batch or self.batch
        if b.n == 0:
            return
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self.ptr, b.raw)
        if rc == 0:
            # llama_decode only queues the graph on GPU and RPC backends (the logits read
            # waits for it): wait here, so a decode's time is its cost (the cost model's
            # curves and live timings) and not billed to whatever reads the logits next.
            # Every caller reads logits right after, so nothing overlaps that this stops.
            llama_cpp.llama_synchronize(self.ptr)
        if rc == 0:
            dt = time.perf_counter() - t0
            lo, hi = b.positions()
            self.span = hi + 1
            if self.on_decode is not None and b.n_outputs == b.n:
                # a free measurement of what an n-token decode costs right now, where it ran
                # in the context (the cost model heals its curves from these)
                self.on_decode(b.n, dt, lo)
        if rc == 2:
            raise DecodeAborted(f"decode stopped on request ({self.model.name})")
        if rc == 1:
            raise ContextFullError(
                f"the context of {self.n_ctx} tokens is full ({self.model.name}); start a new "
                "conversation or raise --ctx"
            )
        if rc != 0:
            raise LocalspecError(f"llama_decode failed with code {rc} ({self.model.name})")
        self.n_decodes += 1
        self.n_evaluated += b.n
        self._n_outputs = b.n_outputs
        self._view = None
        if self.after_decode is not None:
            self.after_decode(b)

    @contextmanager
    def abortable(self) -> Iterator[Callable[[], None]]:
        """Decodes inside may be stopped within a graph node: calling the yielded function
        makes the running one end with DecodeAborted (llama.cpp's abort callback; the stopped
        ubatch's positions removed, the earlier ones kept). The callback is libc's strlen on
        a two-byte buffer whose first byte the stop sets, so the compute thread never takes
        the GIL (a Python callback would, once per graph node, and would stall behind a
        thread that holds it long; beside one waking every millisecond the two cost the same:
        200 Q4 tokens in 2.23 s vs 2.36 s, plain 2.34 s)."""
        buf = ctypes.create_string_buffer(2)
        llama_cpp.llama_set_abort_callback(self.ptr, _strlen_callback(), buf)
        try:
            yield lambda: ctypes.memset(buf, 1, 1)
        finally:
            llama_cpp.llama_set_abort_callback(self.ptr, llama_cpp.ggml_abort_callback(), None)  # NULL: none

    def logits(self, row: int) -> np.ndarray:
        """Logits of output row `row` (the value Batch.add returned): a float32 view."""
        return self.logits_all()[row]

    def logits_all(self) -> np.ndarray:
        """All output rows of the last decode, in batch order, as one (n_outputs, V) view.

        Valid until the next decode on this context; nothing is copied.
        """
        if self._view is None:
            ptr = llama_cpp.llama_get_logits(self.ptr)
            self._view = np.ctypeslib.as_array(ptr, shape=(self._n_outputs, self.n_vocab))
        return self._view

    # ------------------------------------------------------------------ KV ops
    def try_seq_rm(self, seq: int, p0: int = 0, p1: int = -1) -> bool:
        """Forget positions [p0, p1) of a sequence (p1 = -1: to the end; seq = -1: all).

        False when the memory cannot (a recurrent state asked to lose a span it has no
        snapshot for); then nothing changed. Callers that have a fallback use this one."""
        return bool(llama_cpp.llama_memory_seq_rm(self.mem, seq, p0, p1))

    def seq_rm(self, seq: int, p0: int = 0, p1: int = -1) -> None:
        """try_seq_rm that must succeed: a refusal raises SeqOpError."""
        if not self.try_seq_rm(seq, p0, p1):
            end = "the end" if p1 < 0 else str(p1)
            raise SeqOpError(
                f"llama.cpp refused to remove positions {p0}..{end} of sequence {seq} from "
                f"{self.model.name} ({self.memory.value} memory, {self.n_rs_seq} state snapshots); "
                "this is a localspec bug: please report it with the command line"
            )

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int = -1) -> None:
        """Make positions [p0, p1) of src visible to dst too (no data copy in a unified KV;
        a recurrent state is shared whole and copied on dst's next decode)."""
        llama_cpp.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def seq_keep(self, seq: int) -> None:
        """Drop every cell not belonging to seq."""
        llama_cpp.llama_memory_seq_keep(self.mem, seq)

    def pos_max(self, seq: int = 0) -> int:
        """Largest position held by seq (-1 if empty)."""
        return int(llama_cpp.llama_memory_seq_pos_max(self.mem, seq))

    def pos_min(self, seq: int = 0) -> int:
        """Smallest position held by seq (-1 if empty): above 0 when a sliding window's
        cells were reused."""
        return int(llama_cpp.llama_memory_seq_pos_min(self.mem, seq))

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.mem, True)

    def close(self) -> None:
        if self.ptr:
            self.batch.free()
            llama_cpp.llama_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
