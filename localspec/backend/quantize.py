"""Re-quantize a GGUF file with llama.cpp's own quantizer (llama_model_quantize).

Why: the cheapest draft (Q4_0) or a high-precision target (Q8_0 / F16) can be derived
from a file already on disk instead of downloaded. Requantizing (e.g. Q4_K_M -> F16) is
allowed; it cannot add back precision, but it reproduces the cost of a bigger target.

The quantizer runs in a child process (`python -m localspec.backend.quantize`): its
per-tensor log lines then drive a progress bar without touching the log callback the
rest of the backend installed, Ctrl-C stops it at once (a C call cannot be interrupted
in-process), and its memory is returned when it ends. The output appears at `dst` only by
atomic rename after llama.cpp reported success.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

from localspec.errors import BadModelFileError, ConfigError
from localspec.models.gguf import check_gguf

_PROGRESS = re.compile(rb"\[\s*(\d+)/\s*(\d+)\]")


def ftype_names() -> list[str]:
    """Type names accepted by quantize(), read from the installed llama_cpp constants."""
    import llama_cpp

    names = ["F32"]
    prefix = "LLAMA_FTYPE_MOSTLY_"
    names += sorted(n[len(prefix):] for n in dir(llama_cpp) if n.startswith(prefix))
    return names


def ftype_id(name: str) -> int:
    """'Q4_0' / 'q8_0' / 'F16' -> the LLAMA_FTYPE_* value; ConfigError lists valid names."""
    import llama_cpp

    key = name.strip().upper().replace("-", "_")
    attr = "LLAMA_FTYPE_ALL_F32" if key == "F32" else f"LLAMA_FTYPE_MOSTLY_{key}"
    if not hasattr(llama_cpp, attr):
        raise ConfigError(f"--type {name!r} is not a llama.cpp quantization type; choose one "
                          f"of {', '.join(ftype_names())}")
    return int(getattr(llama_cpp, attr))


def quantize(src: Path, dst: Path, ftype: str, threads: int | None = None,
             progress: bool = True, pure: bool = False) -> Path:
    """Write `src` re-quantized to `ftype` at `dst` (atomically); return `dst`.

    pure: every weight tensor in `ftype`, the output (lm head) and token embedding too.
    llama.cpp otherwise keeps the output tensor at a higher precision: Q6_K, or Q8_0 when
    its rows are not a multiple of 256 (Qwen2.5-0.5B: 896). On x86 Q8_0 has no repacked
    kernel, and that one tensor was ~60 % of the 0.5B Q4_0 draft's step at 2 threads
    (10.6 ms -> 8.1 ms pure; 4 sequences 26.8 -> 12.6 ms), for ~1 point of greedy agreement.
    """
    src, dst = Path(src), Path(dst)
    ftype_id(ftype)  # validate the name before starting a process
    check_gguf(src)
    n_threads = threads or os.cpu_count() or 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.qpartial")
    pkg_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "localspec.backend.quantize", str(src), str(tmp), ftype,
           "--threads", str(n_threads)] + (["--pure"] if pure else [])
    tail: collections.deque[str] = collections.deque(maxlen=12)
    from localspec.models.progress import bar

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        with bar(None, f"quantize {src.name} -> {ftype.upper()}{' (pure)' if pure else ''}", progress,
                 unit="tensor") as pbar:
            assert proc.stderr is not None
            for line in proc.stderr:
                tail.append(line.decode("utf-8", "replace").rstrip())
                m = _PROGRESS.search(line)
                if m:
                    pbar.total = int(m.group(2))
                    pbar.update(int(m.group(1)) - pbar.n)
        rc = proc.wait()
        if rc != 0 or not tmp.is_file():
            why = " | ".join(ln for ln in tail if ln.strip())[-600:]
            raise BadModelFileError(f"llama.cpp could not quantize {src} to {ftype} (exit {rc}): "
                                    f"{why or 'no output'}")
        os.replace(tmp, dst)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):
            tmp.unlink()
    return dst


def _quantize_here(src: str, dst: str, ftype: str, threads: int, pure: bool = False) -> int:
    """The in-process call (child side): llama_model_quantize with requantize allowed."""
    import llama_cpp

    @llama_cpp.llama_log_callback
    def to_stderr(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        with contextlib.suppress(Exception):
            sys.stderr.buffer.write(text)
            sys.stderr.buffer.flush()

    llama_cpp.llama_log_set(to_stderr, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype_id(ftype)
    params.nthread = threads
    params.allow_requantize = True
    params.pure = pure
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    print(f"\nllama_model_quantize returned {rc}", file=sys.stderr, flush=True)
    return int(rc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="child side of localspec.backend.quantize")
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("ftype")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--pure", action="store_true")
    a = ap.parse_args(argv)
    return 0 if _quantize_here(a.src, a.dst, a.ftype, a.threads, a.pure) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
