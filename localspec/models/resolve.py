"""Turn a model spec (registry name or path) into a verified local file.

Invariants, whatever happens (Ctrl-C, full disk, a lying mirror):
- a file at its final cache path was renamed there only after its size, sha256 (when one
  is known) and GGUF structure checked out, so a partial fetch never passes as a model;
- a cached file is size-checked on every use and hashed when its (size, mtime) differ from
  the last verification, so corruption is caught without hashing 1 GB on every start;
- every source that failed is named, with its reason, in the final FetchError.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import BadModelFileError, FetchError, LocalspecError, ModelNotFoundError
from localspec.models import cache
from localspec.models.gguf import check_gguf
from localspec.models.progress import note
from localspec.models.registry import ModelSpec, Source, registry
from localspec.models.sources import SourceFailed, run_source


def model_path(name: str) -> Path:
    """Where registry model `name` lives in the cache (whether or not it is there yet)."""
    return cache.models_dir() / registry().get(name).file


def expected_digest(spec: ModelSpec, path: Path) -> tuple[int | None, str | None]:
    """(size, sha256) the cached file must have: the registry's, else those recorded
    when it was first fetched or derived (trust on first use)."""
    if spec.sha256 or spec.size:
        return spec.size, spec.sha256
    side = cache.read_sidecar(path)
    return side.get("size"), side.get("sha256")


@dataclass(frozen=True)
class CacheState:
    """What `models list` shows: cheap checks only (no hashing)."""

    path: Path
    present: bool
    verified: bool
    problem: str | None = None


def cache_state(name: str) -> CacheState:
    spec = registry().get(name)
    path = cache.models_dir() / spec.file
    if not path.is_file():
        return CacheState(path, False, False)
    size, sha = expected_digest(spec, path)
    actual = path.stat().st_size
    if size is not None and actual != size:
        return CacheState(path, True, False, f"size {actual:,} != {size:,}")
    return CacheState(path, True, cache.stamp_is_fresh(path, sha))


def _problem(spec: ModelSpec, path: Path, progress: bool, full: bool) -> str | None:
    """Why the cached file is not the expected model, or None if it is (stamps on success).

    Cheap path: size matches and the sidecar stamp is fresh. Otherwise (or with full=True)
    hash the whole file.
    """
    size, sha = expected_digest(spec, path)
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"size is {actual:,} bytes, expected {size:,}"
    if not full and cache.stamp_is_fresh(path, sha):
        return None
    digest = cache.sha256_file(path, progress, f"verify {spec.name}")
    if sha is not None and digest != sha:
        return f"sha256 is {digest[:16]}..., expected {sha[:16]}..."
    if sha is None:  # nothing to compare with (hand-copied derived file): structure at least
        try:
            check_gguf(path)
        except LocalspecError as e:
            return str(e)
    cache.mark_verified(path, digest)
    return None


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
    with contextlib.suppress(OSError):
        cache.sidecar_path(path).unlink()


def _check_candidate(spec: ModelSpec, tmp: Path, digest: str | None, progress: bool) -> str:
    """Verify a freshly written temp file; return its sha256 or raise SourceFailed."""
    size = tmp.stat().st_size
    if spec.size is not None and size != spec.size:
        raise SourceFailed(f"got {size:,} bytes, expected {spec.size:,}")
    if digest is None:
        digest = cache.sha256_file(tmp, progress, f"sha256 {spec.name}")
    if spec.sha256 is not None and digest != spec.sha256:
        raise SourceFailed(f"sha256 mismatch: got {digest[:16]}..., expected {spec.sha256[:16]}...")
    try:
        check_gguf(tmp)
    except LocalspecError as e:
        raise SourceFailed(str(e)) from None
    return digest


def fetch(name: str, progress: bool = True, force: bool = False,
          extra_sources: tuple[Source, ...] = (),
          only_sources: tuple[Source, ...] | None = None) -> Path:
    """Make registry model `name` present and valid in the cache; return its path.

    An existing valid file is kept (force=True re-fetches). Sources are tried in order
    (extra_sources first); the first one that yields a file with the right size, sha256
    and GGUF structure wins. only_sources (`--from PATH`) replaces the registry's sources:
    a source the user named is never silently replaced by a download.
    """
    spec = registry().get(name)
    final = cache.models_dir(create=True) / spec.file
    named = only_sources is not None
    sources = only_sources if named else (*extra_sources, *spec.sources)
    with cache.fetch_lock(final):
        if final.is_file() and not force:
            problem = _problem(spec, final, progress, full=False)
            if problem is None:
                if named:
                    note(f"[{name}] already cached and verified at {final}; the --from file "
                         "was not read (--force imports it anyway)", True)
                return final
            note(f"[{name}] cached file {final} is corrupt ({problem}); fetching it again",
                 True)
        cache.remove_stale_partials(final)
        failures: list[str] = []
        for i, src in enumerate(sources, 1):
            tmp = cache.partial_path(final)
            note(f"[{name}] source {i}: {src.describe()}", progress)
            try:
                digest = run_source(spec, src, tmp, progress,
                                    resolve=lambda n: resolve_model(n, progress=progress))
                digest = _check_candidate(spec, tmp, digest, progress)
                _discard(final)
                os.replace(tmp, final)
                cache.mark_verified(final, digest, name=name, source=src.describe())
                note(f"[{name}] ready: {final}", progress)
                return final
            except (SourceFailed, LocalspecError, OSError) as e:
                reason = str(e) or type(e).__name__
                failures.append(f"({i}) {src.describe()}: {reason}")
                note(f"[{name}] source {i} failed: {reason}", progress)
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink()
    if named:
        raise FetchError(
            f"could not import {name!r} from the --from file: " + "; ".join(failures)
            + ". The registry's sources were not tried: drop --from to download instead.")
    raise FetchError(
        f"could not fetch {name!r}; every source failed: " + "; ".join(failures)
        + f". Fix one of them, or copy the file yourself and run "
          f"`localspec models fetch {name} --from PATH`."
    )


_fetch_model = fetch  # resolve_model's `fetch` flag shadows the function name


def verify(name: str, progress: bool = True) -> Path:
    """Hash the cached file of `name` in full; BadModelFileError if it is wrong or absent."""
    spec = registry().get(name)
    path = cache.models_dir() / spec.file
    if not path.is_file():
        raise ModelNotFoundError(f"{name} is not downloaded ({path}); run "
                                 f"`localspec models fetch {name}`")
    problem = _problem(spec, path, progress, full=True)
    if problem is not None:
        raise BadModelFileError(f"{name} at {path} is corrupt: {problem}. Run "
                                f"`localspec models fetch --force {name}` to download it again.")
    return path


def resolve_model(spec: str | os.PathLike[str], *, fetch: bool = True,
                  progress: bool = True) -> Path:
    """A --target/--draft value -> a usable GGUF path.

    An existing path wins (checked with check_gguf). Otherwise a registry name: fetched on
    first use (fetch=True) and size/stamp-checked on every use; a corrupt cached file is
    re-fetched. Anything else is ModelNotFoundError naming the path and the fix.
    """
    text = os.fspath(spec)
    path = Path(text).expanduser()
    if path.is_file():  # a path never needs the registry (which may be broken or absent)
        check_gguf(path)
        return path
    looks_like_path = os.sep in text or text.endswith(".gguf") or bool(
        os.altsep and os.altsep in text)
    if looks_like_path:
        check_gguf(path)  # missing -> ModelNotFoundError naming the path; dir -> bad file
    reg = registry()
    if text not in reg.models:
        if path.exists():
            check_gguf(path)
        reg.get(text)  # raises with close-match suggestions
    entry = reg.models[text]
    final = cache.models_dir() / entry.file
    if final.is_file():
        problem = _problem(entry, final, progress, full=False)
        if problem is None:
            return final
        if not fetch:
            raise BadModelFileError(f"cached {text} at {final} is corrupt ({problem}). Run "
                                    f"`localspec models fetch --force {text}`.")
    elif not fetch:
        raise ModelNotFoundError(f"{text} is not downloaded yet; run "
                                 f"`localspec models fetch {text}`")
    return _fetch_model(text, progress=progress)
