"""The target's MTP head (its nextn layers) as a draft context, fed the target's hidden rows.

Qwen3.5/3.6, GLM-4.5+, DeepSeek-V3 and MiMo GGUFs can carry a multi-token-prediction block
after the trunk (`llama_model_n_layer_nextn > 0`, loaded only with `load_mtp`). llama.cpp
runs it in a second context of type `LLAMA_CONTEXT_TYPE_MTP` on the *same* model (its KV
holds the nextn layer alone). Its entry at position p pairs the token x_p with the
target's hidden row h_{p-1} (the normed last hidden state, what the target's own head
reads to predict x_p); its output at p guesses x_{p+1}, and its own hidden row chains the
next guess. That is common/speculative.cpp's `draft-mtp` path, read for this: there every
target decode is re-decoded on the MTP context with the rows shifted by one.

Here the hand-off is lazy. The target context calls `_record` after each decode (the
`after_decode` hook): the rows of a decode that is one run of consecutive positions on the
main or the draft sequence (a prompt chunk, a plain step, a one-draft verification) are
kept in a ring by position. A row at position q is the target's for the committed history
once the target holds q (every such decode starts at the first position its sequence
lacks, and a rejected tail is overwritten before the target holds it again), so `begin`
feeds the head only what the target has committed, together with the pending token that
drafting starts from: one MTP decode per proposal, never one for a rejected token. A
long prompt is fed as it is evaluated (`FLUSH`), so the ring stays bounded.

llama.cpp exports the hidden-state switches (`llama_set_embeddings_nextn`,
`llama_get_embeddings_nextn`, src/llama-ext.h) only as C++ symbols, so they are reached
by their mangled names and checked first: a build without them fails in one line.
`llama_batch_ext_set_embd_state` is a stub that returns false in 0.3.36; a classic
llama_batch carrying both token ids and embeddings is what llama.cpp's MTP batches
become internally (llama_batch_compat), so that is the batch used here.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import llama_cpp
import numpy as np

from localspec.backend.batch import Batch
from localspec.backend.context import Context, context_params
from localspec.errors import ConfigError, ContextFullError, LocalspecError, SeqOpError

# name in src/llama-ext.h -> (its Itanium-mangled symbol, argtypes, restype)
NEXTN_SYMBOLS: dict[str, tuple[str, list, object]] = {
    "llama_set_embeddings_nextn": ("_Z26llama_set_embeddings_nextnP13llama_contextbb",
                                   [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None),
    "llama_get_embeddings_nextn": ("_Z26llama_get_embeddings_nextnP13llama_context",
                                   [ctypes.c_void_p], ctypes.POINTER(ctypes.c_float)),
}
FLUSH = 64  # committed rows the head lags by before it is fed without waiting for a proposal
KEEP = 256  # rows kept behind the head, so a history cut back a little is fed again from them


def lookup_symbol(mangled: str) -> Callable | None:
    """A function of the loaded libllama by its exported (mangled) name, None if absent."""
    return getattr(llama_cpp.llama_cpp._lib, mangled, None)


class Nextn:
    """The two hidden-state calls, bound (ctypes) once their symbols are found."""

    def __init__(self) -> None:
        found = {name: lookup_symbol(sym) for name, (sym, _, _) in NEXTN_SYMBOLS.items()}
        missing = [name for name, fn in found.items() if fn is None]
        if missing:
            raise LocalspecError(
                f"this llama.cpp build does not export {' and '.join(missing)} (C++ symbols of "
                "src/llama-ext.h that the MTP head needs; llama-cpp-python 0.3.36's own libllama "
                "has them): use --spec-type draft, ngram or suffix")
        for name, fn in found.items():
            _, fn.argtypes, fn.restype = NEXTN_SYMBOLS[name]
        self.set = found["llama_set_embeddings_nextn"]
        self.get = found["llama_get_embeddings_nextn"]


def head_layers(model) -> int:  # noqa: ANN001 - a backend Model
    """How many nextn (MTP) layers the model's GGUF has (0: no head)."""
    return int(llama_cpp.llama_model_n_layer_nextn(model.ptr))


class _EmbdBatch(Batch):
    """A Batch whose items carry an embedding row too (the target's hidden state): numpy
    memory behind llama_batch.embd, detached before llama_batch_free (which would free it)."""

    def __init__(self, capacity: int, n_embd: int) -> None:
        super().__init__(capacity, 1)
        self.embd = np.zeros((capacity, n_embd), np.float32)
        self._raw.embd = self.embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))

    def free(self) -> None:
        if self._raw is not None:
            self._raw.embd = None
        super().free()


class MtpHead:
    """An MTP context on the target's model, following the target context's history.

    `tokens[q]` is the token of the head's KV entry at position q (paired with the target's
    row h_{q-1}); entries whose row was lost (a history cut back further than KEEP, a
    decode of another shape) are left out of the KV but kept in `tokens`, so the history
    still lines up: the head then attends over fewer positions, its guesses may be worse,
    and nothing else changes (verification decides what is kept)."""

    def __init__(self, target: Context) -> None:
        model = target.model
        if head_layers(model) == 0:
            raise ConfigError(f"--spec-type mtp: {model.name} has no MTP head (llama_model_n_layer_nextn "
                              "is 0); use a GGUF converted with its nextn layers (Qwen3.5/3.6, GLM-4.5+, "
                              "DeepSeek-V3, MiMo) or --spec-type draft, ngram or suffix")
        if not getattr(model, "load_mtp", False):
            raise ConfigError(f"{model.name} was loaded without its MTP layers: load it with load_mtp "
                              "(SessionOptions(mtp=True); the CLI does when --spec-type names mtp)")
        self.api = Nextn()
        p = context_params(model.load, n_ctx=target.n_ctx, n_batch=target.n_batch, n_ubatch=None,
                           n_seq_max=1, threads=target.threads)
        p.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        p.ctx_other = target.ptr
        ptr = llama_cpp.llama_init_from_model(model.ptr, p)
        if not ptr:
            raise LocalspecError(f"llama.cpp could not create the MTP context of {model.name}; run with "
                                 "--verbose to see its reason")
        self.ptr, self.target, self.model = ptr, target, model
        self.mem = llama_cpp.llama_get_memory(ptr)
        self.n_batch = int(llama_cpp.llama_n_batch(ptr))
        self.n_embd = int(llama_cpp.llama_model_n_embd_out(model.ptr))
        self.n_vocab = model.n_vocab
        # unmasked on both: every token's row, by batch index. (Masked, the head's context
        # would copy the first n_outputs rows of its h_nextn, which its graph computes for
        # every token: the batch's first tokens, not its outputs.)
        self.api.set(target.ptr, True, False)
        self.api.set(ptr, True, False)
        self.batch = _EmbdBatch(self.n_batch, self.n_embd)
        self._embd = self.batch.embd
        cap = 2 * target.n_batch + FLUSH + KEEP + 1  # what one decode, the lag and KEEP can need
        self.rows = np.zeros((cap, self.n_embd), np.float32)
        self.row_pos = np.full(cap, -1, np.int64)  # the position whose row a slot holds
        self.row_tok = np.full(cap, -1, np.int64)
        self.tokens: list[int] = []
        self.n_decodes = 0
        self._out = 0  # batch index of the last decode's output
        self._n = 0
        target.after_decode = self._record

    # ------------------------------------------------------------------ the target's rows
    def _record(self, b: Batch) -> None:
        """After a target decode: keep its rows when it is one run of positions on the main
        or the draft sequence; anything else (a tree of drafts, PARSE's copies) makes what
        the target holds from its first position on unknown here."""
        toks, pos, first = b.columns()
        s, n = int(pos[0]), b.n
        if not (np.all(np.diff(pos) == 1) and np.all(first <= 1)):
            lo = int(pos.min())
            self.row_pos[self.row_pos >= lo] = -1
            self._cut(lo)
            return
        m = s  # the head's entries from s on hold while this decode evaluates the same tokens
        while m < len(self.tokens) and m - s < n and self.tokens[m] == toks[m - s]:
            m += 1
        self._cut(m)
        self.row_pos[self.row_pos >= s] = -1  # a longer earlier decode's tail: stale
        slots = (s + np.arange(n)) % len(self.row_pos)
        self.rows[slots] = np.ctypeslib.as_array(self.api.get(self.target.ptr), shape=(n, self.n_embd))
        self.row_pos[slots] = s + np.arange(n)
        self.row_tok[slots] = toks
        c = len(self.tokens)
        if s - c >= FLUSH:  # everything before s is committed: feed it while its rows are here
            idx = np.arange(c, s) % len(self.row_pos)
            if np.array_equal(self.row_pos[idx], np.arange(c, s)):  # else begin() fills the gaps
                self._feed(self.tokens + self.row_tok[idx].tolist())

    def _row(self, q: int, token: int) -> np.ndarray | None:
        """The target's row at position q for `token` there (zeros before the first), or None."""
        if q < 0:
            return np.zeros(self.n_embd, np.float32)
        i = q % len(self.row_pos)
        return self.rows[i] if self.row_pos[i] == q and self.row_tok[i] == token else None

    # ------------------------------------------------------------------ the head's KV
    def _cut(self, keep: int) -> None:
        """Forget the head's entries from position `keep` on."""
        if keep < len(self.tokens):
            self._rm(keep)
            del self.tokens[keep:]

    def _feed(self, history: list[int], last: int | None = None) -> bool:
        """Entries for history[len(tokens):] (the head's tokens are a prefix of it), each with
        the target's row before it, then, when `last` is given, that token at len(history)
        with an output. False when the row before `last` is unknown: no output then."""
        c = len(self.tokens)
        todo = []
        for q in range(c, len(history)):
            h = self._row(q - 1, history[q - 1] if q else -1)
            if h is not None:  # a lost row leaves a gap in the KV
                todo.append((q, history[q], h))
        self.tokens.extend(history[c:])
        out = last is not None
        if out:
            P = len(history)
            h = self._row(P - 1, history[P - 1] if P else -1)
            out = h is not None
            if out:
                todo.append((P, last, h))
                self.tokens.append(last)
        self._flush(todo, out)
        return out

    def _flush(self, todo: list[tuple[int, int, np.ndarray]], output_last: bool) -> None:
        """Decode entries (position, token, row) in batches of n_batch; the last one with an
        output when asked."""
        for start in range(0, len(todo), self.n_batch):
            chunk = todo[start : start + self.n_batch]
            out = output_last and start + len(chunk) == len(todo)
            self._decode([t for _, t, _ in chunk], [q for q, _, _ in chunk], np.stack([h for _, _, h in chunk]), out)

    def _decode(self, toks: list[int], pos: list[int], rows: np.ndarray, output_last: bool) -> None:
        b = self.batch.clear()
        for i, (t, q) in enumerate(zip(toks, pos, strict=True)):
            b.add(t, q, 0, output_last and i == len(toks) - 1)
        self._embd[: len(toks)] = rows
        rc = llama_cpp.llama_decode(self.ptr, b.raw)
        if rc == 1:
            raise ContextFullError(f"the MTP context of {self.model.name} is full; start a new conversation or raise --ctx")
        if rc != 0:
            raise LocalspecError(f"llama_decode failed with code {rc} on the MTP context of {self.model.name}")
        self.n_decodes += 1
        self._n, self._out = len(toks), len(toks) - 1

    def _output(self) -> tuple[np.ndarray, np.ndarray]:
        """The last decode's output: its logits (a view, valid until the next decode) and the
        head's hidden row for it (a copy: it feeds the next decode)."""
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self.ptr), shape=(1, self.n_vocab))[0]
        h = np.ctypeslib.as_array(self.api.get(self.ptr), shape=(self._n, self.n_embd))[self._out].copy()
        return logits, h

    # ------------------------------------------------------------------ drafting
    def begin(self, evaluated: list[int], pending: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Bring the head to the target's evaluated tokens and decode the pending token at
        len(evaluated), in one decode: the head's logits for the token after it (a view,
        valid until the next decode) and its hidden row. None when the target's row before
        the pending token is not known (the target has not evaluated that token yet)."""
        keep, n = 0, min(len(self.tokens), len(evaluated))
        while keep < n and self.tokens[keep] == evaluated[keep]:
            keep += 1
        self.rewind(keep)  # also a draft chain an interrupted proposal left behind
        return self._output() if self._feed(evaluated, pending) else None

    def step(self, token: int, pos: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The head's guess after `token` at `pos`, chained on its own hidden row `h`."""
        self._decode([token], [pos], h[None, :], True)
        return self._output()

    def rewind(self, end: int) -> None:
        """Drop the entries from `end` on: a draft chain's, paired with the head's own rows
        rather than the target's, are no history (and `tokens` never held them)."""
        self._rm(end)
        del self.tokens[end:]

    def _rm(self, p0: int) -> None:
        """Drop the head's entries from p0 on; a refusal (llama.cpp returns False) means the
        head's history is not what `tokens` says: stop rather than draft from it."""
        if not llama_cpp.llama_memory_seq_rm(self.mem, 0, p0, -1):
            raise SeqOpError(f"llama.cpp refused to drop the MTP head's entries from position {p0} "
                             f"({self.model.name}); this is a localspec bug: please report it")

    def close(self) -> None:
        """Free the head (before the target context it reads from)."""
        if self.ptr:
            if getattr(self.target, "after_decode", None) == self._record:
                self.target.after_decode = None
            self.batch.free()
            llama_cpp.llama_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
