"""Command lines of the servers `localspec bench serve` starts, llama-server's above all.

Every server gets the same model files, thread count and context *per request*: a slot
server splits its `-c` over its slots (llama-server without `--kv-unified` gives each of
its `-np N` slots `c / N`, tools/server/server-context.cpp n_ctx_slot()), so it is started
with `-c ctx * N` and each slot holds what localspec's one context holds.
"""

from __future__ import annotations

import argparse
import functools
import re
import shlex
import subprocess
import sys
from importlib.util import find_spec

from localspec.bench.peer import SERVER_BIN, peer_tool

LOCALSPEC_KINDS = ("localspec", "localspec-1", "localspec-ar")


@functools.lru_cache(maxsize=1)
def localspec_slots_flag() -> str | None:
    """The flag `localspec serve` takes for its number of slots ('-np' / '--parallel'), or
    None when this version has none (then it serves one request at a time). Read from its
    --help, not from an import, so the bench measures the server that actually runs."""
    try:
        out = subprocess.run([sys.executable, "-m", "localspec.cli", "serve", "--help"], capture_output=True,
                             text=True, timeout=120, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_slots_flag(out)


def parse_slots_flag(help_text: str) -> str | None:
    """'-np' or '--parallel' when the help text offers it (as an option, not in prose)."""
    for flag in ("-np", "--parallel"):
        if re.search(rf"(?:^|[\s,\[]){re.escape(flag)}(?=[\s,=\]])", help_text, re.MULTILINE):
            return flag
    return None


def llama_server_cmd(binary: str, a: argparse.Namespace, port: int) -> list[str]:
    """llama-server with `a.np` slots, flag names as in the vendored common/arg.cpp.

    With a draft: `--spec-type draft-simple` is required, as for llama-speculative-simple
    (a plain GGUF draft carries no speculative type, and the default type is 'none'); the
    old `--draft-max/--draft-min` are removed in these sources (`--spec-draft-n-max/-min`).
    Draft threads equal target threads, as in localspec. No web UI (the build has none).
    `a.peer_args` is appended as given (e.g. '--poll 0': llama.cpp's persistent thread pools
    spin-wait by default, which on cores shared with other jobs costs it several times).
    """
    t = str(a.threads)
    cmd = [binary, "-m", a.target, "--host", "127.0.0.1", "--port", str(port),
           "-c", str(a.ctx * a.np), "-np", str(a.np), "-t", t, "-tb", t, "--no-webui"]
    if a.draft:
        cmd += ["-md", a.draft, "--spec-type", "draft-simple", "-td", t, "-tbd", t,
                "--spec-draft-n-max", str(a.peer_draft_max), "--spec-draft-n-min", str(a.peer_draft_min),
                "--spec-draft-p-min", repr(float(a.peer_p_min))]
    return cmd + shlex.split(getattr(a, "peer_args", "") or "")


def localspec_cmd(kind: str, a: argparse.Namespace, port: int, slots_flag: str | None) -> tuple[list[str], int]:
    """`localspec serve` for `localspec` (a.np slots when it has a slots flag), `localspec-1`
    (one slot: the baseline of the issue's ratios) and `localspec-ar` (`--method ar`, one
    slot). Returns the command and the slots it will really have."""
    slots = a.np if kind == "localspec" and slots_flag else 1
    # -c and --batch are totals split over the slots (as llama-server's -c): each slot holds a.ctx
    cmd = [sys.executable, "-m", "localspec.cli", "serve", "-m", a.target, "--port", str(port),
           "-c", str(a.ctx * slots), "-b", str(512 * slots), "-t", str(a.threads), "--queue", str(max(16, a.clients)),
           "--log-level", "warning", "-n", str(a.n_predict)]
    if slots > 1:
        cmd += [slots_flag, str(slots)]
    if kind == "localspec-ar":
        return [*cmd, "--method", "ar"], slots
    cmd += ["--method", a.method]
    return ([*cmd, "-md", a.draft] if a.draft else cmd), slots


def server_cmd(kind: str, a: argparse.Namespace, port: int) -> tuple[list[str] | None, int, str]:
    """(command, slots, reason): command None with the one-line reason when the server
    cannot run here (not built, extra missing)."""
    if kind == "llama-server":
        binary = peer_tool(SERVER_BIN)
        if binary is None:
            return None, a.np, f"{SERVER_BIN} not built: run scripts/build_llama_cpp_peer.sh"
        return llama_server_cmd(str(binary), a, port), a.np, ""
    if kind == "llama-cpp":
        if find_spec("sse_starlette") is None or find_spec("starlette_context") is None:
            return None, 1, "llama_cpp.server's extra is not installed (pip install 'llama-cpp-python[server]')"
        return [sys.executable, "-m", "llama_cpp.server", "--model", a.target, "--n_ctx", str(a.ctx),
                "--n_threads", str(a.threads), "--host", "127.0.0.1", "--port", str(port)], 1, ""
    cmd, slots = localspec_cmd(kind, a, port, localspec_slots_flag() if kind == "localspec" and a.np > 1 else None)
    return cmd, slots, ""
