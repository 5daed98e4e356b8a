"""A loaded GGUF model: vocabulary, tokenizer, UTF-8-safe detokenizer, chat template.

Everything here is per-model and stateless with respect to generation (contexts hold the KV
state), so one Model can back several contexts.
"""

from __future__ import annotations

import codecs
import ctypes
from functools import cached_property
from pathlib import Path

import llama_cpp

from localspec.backend.fim import FimTokens
from localspec.backend.logs import configure_logging, raise_pending
from localspec.backend.memory import Memory, memory_of
from localspec.backend.offload import model_params, plan_models
from localspec.backend.specials import CHUNK_BYTES, Specials
from localspec.errors import BadModelFileError, ModelNotFoundError, VocabMismatchError
from localspec.placement.load import LoadOptions
from localspec.placement.plan import Placement
from localspec.session import SessionOptions

# llama.cpp's own speculative examples compare token texts from this id on (the first ids
# are special tokens that often differ between otherwise compatible models).
VOCAB_CHECK_START_ID = 5
VOCAB_MAX_SIZE_DIFF = 128


class Model:
    """A GGUF model loaded with llama.cpp (logs silenced unless verbose).

    `load` says where its layers may go (-ngl, -dev, -sm, -ts, -mg; its flash-attention,
    KV-offload and thread settings reach the contexts made on it); `placement` is the plan
    computed for it (localspec.backend.offload.plan_pair plans target and draft jointly);
    without one the model is planned alone. `load_mtp` loads the GGUF's nextn (MTP)
    layers too, for backend/mtp.py's head (llama.cpp skips them otherwise).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        verbose: bool = False,
        use_mmap: bool = True,
        load: LoadOptions | None = None,
        placement: Placement | None = None,
        load_mtp: bool = False,
    ) -> None:
        path = Path(path)
        if not path.is_file():
            raise ModelNotFoundError(f"model file not found: {path}")
        configure_logging(verbose)
        load = load or LoadOptions()
        if placement is None:
            placement = plan_models(SessionOptions(), [("target", path, load)])[0]
        params, keep = model_params(load, placement, use_mmap=use_mmap, load_mtp=load_mtp)
        ptr = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not ptr:
            raise BadModelFileError(
                f"llama.cpp could not load {path} (not a GGUF model of a supported architecture, "
                "or a truncated file); run with --verbose to see llama.cpp's reason"
            )
        self.path = path
        self.name = path.name
        self.ptr = ptr  # freed by __del__ if what follows raises
        raise_pending()  # a Ctrl-C the log callback kept during the load (logs.py)
        self.load = load
        self.placement = placement
        self.load_mtp = load_mtp  # its nextn layers are loaded (an MTP head can run on it)
        self._params_keep = keep  # the device list and split the params point to (row split reads it later)
        self.vocab = llama_cpp.llama_model_get_vocab(ptr)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.bos: int = llama_cpp.llama_vocab_bos(self.vocab)
        self.eos: int = llama_cpp.llama_vocab_eos(self.vocab)
        self.add_bos: bool = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self.vocab_type: int = llama_cpp.llama_vocab_type(self.vocab)
        self.n_ctx_train: int = llama_cpp.llama_model_n_ctx_train(ptr)
        # what it keeps between tokens decides which sequence operations are safe
        self.memory: Memory = memory_of(ptr)
        self.n_swa: int = int(llama_cpp.llama_model_n_swa(ptr))
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}
        self._control_cache: dict[int, bool] = {}

    # ------------------------------------------------------------------ metadata
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as a string (None if absent)."""
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_model_meta_val_str(self.ptr, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", errors="replace")
            size = n + 1

    def chat_template(self) -> str | None:
        """The jinja chat template stored in the GGUF (None if the model has none)."""
        raw = llama_cpp.llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    @cached_property
    def fim(self) -> FimTokens:
        """The vocabulary's fill-in-the-middle token ids (backend/fim.py)."""
        return FimTokens.of_vocab(self.vocab)

    def token_text(self, token: int) -> bytes:
        """Raw vocabulary text of a token (as stored, e.g. with the BPE space marker)."""
        return llama_cpp.llama_vocab_get_text(self.vocab, token) or b""

    # ------------------------------------------------------------------ tokens
    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Text -> token ids. parse_special lets template markers (<|im_start|>) be one token.

        A text longer than CHUNK_BYTES is tokenized in pieces cut where llama.cpp's split of
        special tokens certainly ends one (backend/specials.py): the same ids, but linear in
        the number of special-token texts, where one llama_tokenize call is quadratic."""
        data = text.encode("utf-8")
        if len(data) <= CHUNK_BYTES or (add_special and not self._bos_only):
            return self._raw(data, add_special, parse_special)
        return self.specials.tokenize(data, self._raw, add_special=add_special, parse_special=parse_special)

    def tokenize_plain(self, text: str, spans: list[tuple[int, int]]) -> list[int]:
        """Token ids of `text` where the character ranges `spans` (message text) are plain
        text: a control token's text inside them is never that token (parse_special=False
        there, special tokens parsed elsewhere; no BOS added)."""
        data, byte_spans, at, pos = text.encode("utf-8"), [], 0, 0
        for a, b in spans:  # character offsets -> byte offsets, one pass
            pos += len(text[at:a].encode("utf-8"))
            start = pos
            pos += len(text[a:b].encode("utf-8"))
            byte_spans.append((start, pos))
            at = b
        return self.specials.tokenize_plain(data, byte_spans, self._raw)

    @cached_property
    def specials(self) -> Specials:
        """The vocabulary's special-token texts (read once, when a long text first needs them)."""
        return Specials.of_vocab(self.vocab, self.n_vocab)

    @cached_property
    def _bos_only(self) -> bool:
        """Whether add_special adds nothing but a leading BOS (then only a first piece takes it)."""
        kinds = (llama_cpp.LLAMA_VOCAB_TYPE_SPM, llama_cpp.LLAMA_VOCAB_TYPE_BPE, llama_cpp.LLAMA_VOCAB_TYPE_UGM)
        return self.vocab_type in kinds and not llama_cpp.llama_vocab_get_add_eos(self.vocab)

    def _raw(self, data: bytes, add_special: bool, parse_special: bool) -> list[int]:
        """One llama_tokenize call."""
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """Bytes a token contributes to the text (cached: called on every emitted token)."""
        got = self._piece_cache.get(token)
        if got is None:
            buf = ctypes.create_string_buffer(64)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
            got = buf.raw[:n]
            self._piece_cache[token] = got
        return got

    def detokenize(self, tokens: list[int] | tuple[int, ...]) -> str:
        """Token ids -> text (invalid UTF-8 replaced; use Detokenizer for streams)."""
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def is_control(self, token: int) -> bool:
        """A control token (chat-template markers: <|im_start|>, <|im_end|>, EOS, FIM markers)
        or an end-of-generation one: text a lookup never copies across, since a turn's text
        never goes on into the next turn's header (drafters/lookup.py). Cached per id: asked
        only of the tokens a lookup would draft (the whole vocabulary's attributes: 0.3 s)."""
        got = self._control_cache.get(token)
        if got is None:
            ctl = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
            got = bool(0 <= token < self.n_vocab and llama_cpp.llama_vocab_get_attr(self.vocab, token) & ctl) \
                or self.is_eog(token)
            self._control_cache[token] = got
        return got

    @property
    def control_ids(self) -> ControlTokens:
        """`token in model.control_ids`: is_control (a lookup's barrier, NgramIndex.barrier)."""
        return ControlTokens(self)

    def is_eog(self, token: int) -> bool:
        """End-of-generation token (EOS, EOT, <|im_end|>, ...)."""
        got = self._eog_cache.get(token)
        if got is None:
            got = bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
            self._eog_cache[token] = got
        return got

    def close(self) -> None:
        if self.ptr:
            llama_cpp.llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


class Detokenizer:
    """Incremental token -> text that never splits a UTF-8 character.

    Byte-level BPE tokens can end in the middle of a multi-byte character; an incremental
    decoder holds those bytes back until the character is complete.
    """

    def __init__(self, model: Model) -> None:
        self._model = model
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, tokens: list[int] | tuple[int, ...]) -> str:
        """Text completed by these tokens (may be '' while a character is incomplete)."""
        return self._dec.decode(b"".join(self._model.piece(t) for t in tokens))

    def flush(self) -> str:
        """Whatever is held back (replacement chars if the stream ended mid-character)."""
        return self._dec.decode(b"", final=True)

    def peek(self, tokens: list[int] | tuple[int, ...]) -> str:
        """Text these tokens WOULD add, without consuming them (for rejected drafts)."""
        state = self._dec.getstate()
        try:
            return self.push(tokens) + self._dec.decode(b"", final=True)
        finally:
            self._dec.setstate(state)


class ControlTokens:
    """A model's control and end-of-generation tokens as a container (`t in ...`), asked
    token by token (Model.is_control) instead of listed."""

    __slots__ = ("_model",)

    def __init__(self, model: Model) -> None:
        self._model = model

    def __contains__(self, token: object) -> bool:
        return isinstance(token, int) and self._model.is_control(token)


def check_vocab_compat(target: Model, draft: Model) -> None:
    """Raise VocabMismatchError unless the draft can speculate for the target.

    Mirrors llama.cpp's speculative check: same vocab type, same BOS/EOS (and add-BOS), vocab
    sizes within 128, identical token text from id 5 on.
    """
    names = f"target {target.name} vs draft {draft.name}"
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > VOCAB_MAX_SIZE_DIFF:
        raise VocabMismatchError(
            f"vocabulary sizes differ by {diff} > {VOCAB_MAX_SIZE_DIFF} ({names}): "
            f"{target.n_vocab} vs {draft.n_vocab} tokens; pick a draft of the same model family"
        )
    if target.vocab_type != draft.vocab_type:
        raise VocabMismatchError(f"vocabulary types differ ({names}): {target.vocab_type} vs {draft.vocab_type}")
    if target.add_bos != draft.add_bos or (target.add_bos and target.bos != draft.bos):
        raise VocabMismatchError(f"BOS tokens differ ({names}): {target.bos} vs {draft.bos}")
    if target.eos != draft.eos:
        raise VocabMismatchError(f"EOS tokens differ ({names}): {target.eos} vs {draft.eos}")
    for tok in range(VOCAB_CHECK_START_ID, min(target.n_vocab, draft.n_vocab)):
        a, b = target.token_text(tok), draft.token_text(tok)
        if a != b:
            raise VocabMismatchError(
                f"token {tok} differs ({names}): {a!r} vs {b!r}; pick a draft of the same model family"
            )
