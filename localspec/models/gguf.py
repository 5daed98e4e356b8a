"""Just enough GGUF parsing to tell a whole model file from a wrong or truncated one.

Why not trust the extension: a half-finished download, an HTML error page saved as
`.gguf`, or a file cut off by a full disk all load "fine" until llama.cpp reads past the
end (or crashes). Parsing the header and the tensor table gives the exact byte count the
file must have; a file shorter than that is truncated, whatever its name. No llama_cpp
import: this runs before any model is loaded, and in the registry room.
"""

from __future__ import annotations

import functools
import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from localspec.errors import BadModelFileError, ModelNotFoundError

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types -> struct format of a scalar (strings and arrays handled apart).
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# ggml tensor type id -> (elements per block, bytes per block). Unknown ids (newer ggml)
# are tolerated: such a tensor only contributes its offset to the size bound.
_QK = 256
GGML_BLOCK = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 40), 10: (_QK, 84), 11: (_QK, 110), 12: (_QK, 144), 13: (_QK, 176),
    14: (_QK, 210), 15: (_QK, 292), 16: (_QK, 66), 17: (_QK, 74), 18: (_QK, 98),
    19: (_QK, 50), 20: (32, 18), 21: (_QK, 110), 22: (_QK, 82), 23: (_QK, 136),
    24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (_QK, 56), 30: (1, 2),
    34: (_QK, 54), 35: (_QK, 66), 39: (32, 17),
}
GGML_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S",
    23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
    30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}

# Metadata worth keeping (small strings / ints); big arrays (vocab) are skipped, not stored.
_KEEP = ("general.architecture", "general.name", "general.file_type", "general.alignment",
         "general.quantization_version", "tokenizer.ggml.model")


@dataclass(frozen=True)
class TensorEntry:
    """One row of the tensor table: enough to know which layer holds how many bytes."""

    name: str
    type_id: int
    n_elements: int
    nbytes: int  # 0 for a tensor type this table does not know


@dataclass(frozen=True)
class GGUFInfo:
    """What the header says about a file, and the size it must therefore have."""

    path: Path
    version: int
    n_tensors: int
    n_kv: int
    data_offset: int
    expected_size: int
    file_size: int
    metadata: dict[str, object]
    tensor_types: dict[str, int]  # type name -> number of tensors
    # filled only by read_header (detail=True): the placement planner's inputs
    tensors: tuple[TensorEntry, ...] = ()
    arrays: dict[str, int] = field(default_factory=dict)  # array key -> element count

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "?"))


class _ArrayLen(int):
    """What the reader returns for an array: its length (the elements are skipped)."""


class _Truncated(Exception):
    """Raised by the reader when the header itself runs past the end of the file."""


_U64 = struct.Struct("<Q")


class _Reader:
    """Cursor over an mmap: struct.unpack_from without copying a 1 GB file into memory."""

    def __init__(self, buf: mmap.mmap | bytes) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)

    def take(self, fmt: str) -> object:
        size = struct.calcsize(fmt)
        if self.pos + size > self.end:
            raise _Truncated
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def skip(self, n: int) -> None:
        if self.pos + n > self.end:
            raise _Truncated
        self.pos += n

    def string(self, keep: bool = True) -> str:
        n = int(self.take("<Q"))  # type: ignore[arg-type]
        if n > 1 << 32:
            raise ValueError(f"absurd string length {n}")
        start = self.pos
        self.skip(n)
        return bytes(self.buf[start:start + n]).decode("utf-8", "replace") if keep else ""

    def _skip_strings(self, count: int) -> None:
        """Jump over `count` strings in one tight loop: the tokenizer's tokens and merges
        (~300k strings for a Qwen vocabulary) took 0.2 s a header through take/skip."""
        buf, pos, end, length = self.buf, self.pos, self.end, _U64.unpack_from
        for _ in range(count):
            if pos + 8 > end:
                raise _Truncated
            (n,) = length(buf, pos)
            if n > 1 << 32:
                raise ValueError(f"absurd string length {n}")
            pos += 8 + n
        if pos > end:
            raise _Truncated
        self.pos = pos

    def value(self, vtype: int, keep: bool) -> object:
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string(keep)
        if vtype == _ARRAY:
            itype = int(self.take("<I"))  # type: ignore[arg-type]
            count = int(self.take("<Q"))  # type: ignore[arg-type]
            if itype in _SCALAR:  # fixed width: jump over the whole array at once
                self.skip(count * struct.calcsize(_SCALAR[itype]))
            elif itype == _STRING:  # a vocabulary: 150k strings, only their lengths read
                self._skip_strings(count)
            else:
                for _ in range(count):
                    self.value(itype, keep=False)
            return _ArrayLen(count)
        raise ValueError(f"unknown metadata value type {vtype}")


def _bad(path: Path, why: str) -> BadModelFileError:
    return BadModelFileError(
        f"{path} is not a usable GGUF model: {why}. Re-download it (for a registry model: "
        f"`localspec models fetch --force NAME`) or pass another file."
    )


def read_header(path: str | Path) -> GGUFInfo:
    """check_gguf plus every scalar metadata value, array lengths and the tensor table.

    Why apart from check_gguf: the placement planner needs bytes per layer and the
    attention shape (to size the KV cache) before llama.cpp loads anything, while the
    registry's checks run on every use and keep only a few keys. Cached per (file, size,
    mtime): a load asks for it more than once (the planner per model, the MTP check), and
    walking a 151k-token vocabulary in Python costs ~0.1 s each time. The info is shared:
    callers read it, never change it.
    """
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        return check_gguf(p, detail=True)  # the one-line error for a missing file
    return _header(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _header(path: str, size: int, mtime_ns: int) -> GGUFInfo:
    return check_gguf(path, detail=True)


def nextn_layers(path: str | Path) -> int:
    """How many nextn (MTP head) layers a GGUF declares (`<arch>.nextn_predict_layers`; 0:
    none). Read before loading, so a head is loaded only where auto would use it."""
    info = read_header(path)  # every scalar key (check_gguf keeps only a few)
    value = info.metadata.get(f"{info.architecture}.nextn_predict_layers", 0)
    return int(value) if isinstance(value, (int, float)) else 0


def check_gguf(path: str | Path, *, detail: bool = False) -> GGUFInfo:
    """Parse the header and tensor table; raise BadModelFileError unless the file is whole.

    The expected size is data_offset + max(tensor offset + tensor bytes): every byte
    llama.cpp will read. A shorter file is truncated; a missing path is ModelNotFoundError.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelNotFoundError(
            f"model file {path} does not exist. Pass an existing .gguf path or a registry "
            "name (see `localspec models list`)."
        )
    if path.is_dir():
        raise _bad(path, "it is a directory")
    file_size = path.stat().st_size
    if file_size < 24:
        raise _bad(path, f"only {file_size} bytes (empty or truncated)")
    with open(path, "rb") as f:
        head = f.read(4)
        if head != MAGIC:
            raise _bad(path, f"it does not start with the GGUF magic bytes (found {head!r})")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                return _parse(path, buf, file_size, detail)
            except _Truncated:
                raise _bad(path, f"truncated inside its header ({file_size} bytes)") from None
            except (ValueError, struct.error, UnicodeDecodeError) as e:
                raise _bad(path, f"corrupt header ({e})") from None


def _parse(path: Path, buf: mmap.mmap, file_size: int, detail: bool = False) -> GGUFInfo:
    r = _Reader(buf)
    r.skip(4)
    version = int(r.take("<I"))  # type: ignore[arg-type]
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version} (llama.cpp reads 2 and 3)")
    n_tensors = int(r.take("<Q"))  # type: ignore[arg-type]
    n_kv = int(r.take("<Q"))  # type: ignore[arg-type]
    if n_tensors > 1 << 24 or n_kv > 1 << 24:
        raise ValueError(f"implausible counts (tensors={n_tensors}, kv={n_kv})")
    meta: dict[str, object] = {}
    arrays: dict[str, int] = {}
    for _ in range(n_kv):
        key = r.string()
        vtype = int(r.take("<I"))  # type: ignore[arg-type]
        keep = key in _KEEP or (detail and vtype != _STRING)
        val = r.value(vtype, keep)
        if isinstance(val, _ArrayLen):
            arrays[key] = int(val)
        elif keep:
            meta[key] = val
    alignment = int(meta.get("general.alignment", DEFAULT_ALIGNMENT))  # type: ignore[arg-type]
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"bad alignment {alignment}")
    data_end = 0
    types: dict[str, int] = {}
    table: list[TensorEntry] = []
    for _ in range(n_tensors):
        tname = r.string(keep=detail)
        n_dims = int(r.take("<I"))  # type: ignore[arg-type]
        if n_dims > 8:
            raise ValueError(f"tensor with {n_dims} dimensions")
        n_el = 1
        for _ in range(n_dims):
            n_el *= int(r.take("<Q"))  # type: ignore[arg-type]
        ttype = int(r.take("<I"))  # type: ignore[arg-type]
        offset = int(r.take("<Q"))  # type: ignore[arg-type]
        name = GGML_TYPE_NAMES.get(ttype, f"type{ttype}")
        types[name] = types.get(name, 0) + 1
        nbytes = 0
        if ttype in GGML_BLOCK:
            blck, tsize = GGML_BLOCK[ttype]
            nbytes = (n_el + blck - 1) // blck * tsize
        data_end = max(data_end, offset + nbytes)
        if detail:
            table.append(TensorEntry(tname, ttype, n_el, nbytes))
    data_offset = (r.pos + alignment - 1) // alignment * alignment
    expected = data_offset + data_end
    if file_size < expected:
        raise _bad(path, f"truncated: {file_size:,} bytes but its tensors need {expected:,} "
                         f"({expected - file_size:,} missing)")
    return GGUFInfo(path=path, version=version, n_tensors=n_tensors, n_kv=n_kv,
                    data_offset=data_offset, expected_size=expected, file_size=file_size,
                    metadata=meta, tensor_types=types, tensors=tuple(table),
                    arrays=arrays if detail else {})
