"""The on-disk cache: where models live, what we know about each file, and who writes it.

Layout under `$LOCALSPEC_HOME` (default `~/.cache/localspec`):

    models/<file>.gguf                 the model, only ever created by an atomic rename
    models/<file>.gguf.localspec.json  sidecar: sha256 + size recorded at fetch, and the
                                       (size, mtime) at which the sha was last checked
    models/.<file>.gguf.<pid>.partial  a fetch in progress (never mistaken for a model)
    models/.<file>.gguf.lock           serialises concurrent fetches of one model

The sidecar is what lets `resolve_model` skip hashing 1 GB on every start while still
catching a file that changed since it was verified (size or mtime moved).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from localspec.errors import FetchError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process lock, still atomic
    fcntl = None  # type: ignore[assignment]

SIDECAR_SUFFIX = ".localspec.json"
CHUNK = 4 << 20


def home_dir() -> Path:
    """$LOCALSPEC_HOME, else ~/.cache/localspec (XDG_CACHE_HOME honoured)."""
    env = os.environ.get("LOCALSPEC_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "localspec"


def models_dir(create: bool = False) -> Path:
    d = home_dir() / "models"
    if create:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise FetchError(
                f"cannot create the model cache {d}: {e}. Set LOCALSPEC_HOME to a writable "
                "directory."
            ) from None
    return d


def sidecar_path(model_file: Path) -> Path:
    return model_file.with_name(model_file.name + SIDECAR_SUFFIX)


def read_sidecar(model_file: Path) -> dict[str, Any]:
    """The sidecar's content, or {} when missing or unreadable (then we re-hash)."""
    try:
        data = json.loads(sidecar_path(model_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_sidecar(model_file: Path, **fields: Any) -> None:
    """Merge `fields` into the sidecar, written atomically (a torn JSON is just ignored)."""
    data = read_sidecar(model_file)
    data.update(fields)
    target = sidecar_path(model_file)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def stamp_for(path: Path) -> dict[str, int]:
    """(size, mtime_ns) of a file: cheap to compare, changes when the file is rewritten."""
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def mark_verified(path: Path, sha256: str, **extra: Any) -> bool:
    """Record that `path` hashed to `sha256` in its current state; False when the sidecar
    cannot be written. A read-only cache (a shared or packaged LOCALSPEC_HOME whose files
    were copied, so their stamps are stale) still serves its models: the file is verified,
    only the record is missing, so the next start hashes it again (issue 43)."""
    try:
        write_sidecar(path, sha256=sha256, size=path.stat().st_size, verified=stamp_for(path),
                      verified_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra)
    except OSError:
        return False
    return True


def stamp_is_fresh(path: Path, sha256: str | None) -> bool:
    """True if the sidecar says this exact file state already hashed to the expected sha."""
    side = read_sidecar(path)
    if not side.get("verified") or side.get("verified") != stamp_for(path):
        return False
    return sha256 is None or side.get("sha256") == sha256


def partial_path(final: Path) -> Path:
    """A same-directory temp name (so os.replace is an atomic rename, never a copy)."""
    return final.with_name(f".{final.name}.{os.getpid()}.partial")


def remove_stale_partials(final: Path) -> None:
    """Delete leftovers of killed fetches of this file: partial files, wheel dirs, quantizer
    temp files (we hold the file's lock, so none of them belongs to a live fetch)."""
    for p in final.parent.glob(f".*{final.name}.*"):
        if "partial" not in p.name:
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()


@contextlib.contextmanager
def fetch_lock(final: Path) -> Iterator[None]:
    """Exclusive lock per model file, so two processes never assemble the same model."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover
        yield
        return
    with open(final.with_name(f".{final.name}.lock"), "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            from localspec.models.progress import note

            note(f"waiting for another localspec process fetching {final.name} ...")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def sha256_file(path: Path, progress: bool = True, desc: str | None = None) -> str:
    """Hash a file in chunks with a progress bar (hashing 1 GB takes a few seconds)."""
    from localspec.models.progress import bar

    h = hashlib.sha256()
    with open(path, "rb") as f, bar(path.stat().st_size, desc or f"sha256 {path.name}",
                                    progress) as pbar:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            pbar.update(len(chunk))
    return h.hexdigest()
