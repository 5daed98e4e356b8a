"""llama.cpp's own tools as the "peer" column of `localspec bench`.

Reviewers ask "faster than what?": the honest answer is llama.cpp's own speculative loop
(`llama-speculative-simple`) and plain decoding measured by `llama-bench`, built from the
SAME llama.cpp sources as the installed llama-cpp-python (scripts/build_llama_cpp_peer.sh),
run on the same models, prompt tokens and thread count. This module finds those binaries,
builds their command lines and parses what they print; it never imports llama_cpp (only the
backend does), so it also works where the binaries came from elsewhere.

The peer is optional: when it is not built, callers get `None` from `peer_binaries()` or a
`PeerNotBuiltError` that names the build script. llama-bench (AR speed, batch costs) is in
llama_bench.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from localspec.bench.peer_timeline import LOG_ARGS, speed_at, timeline
from localspec.errors import LocalspecError

SPEC_BIN = "llama-speculative-simple"
BENCH_BIN = "llama-bench"
SERVER_BIN = "llama-server"
BUILD_SCRIPT = "scripts/build_llama_cpp_peer.sh"
TAIL_CHARS = 2000


class PeerNotBuiltError(LocalspecError):
    """The llama.cpp peer binaries are missing (the message says how to build them)."""


class PeerRunError(LocalspecError):
    """A peer binary failed or printed something we could not parse (message has its tail)."""


# --------------------------------------------------------------------------- locating


def _home_dir() -> Path:
    """Same cache root as the model cache, so one LOCALSPEC_HOME moves everything."""
    env = os.environ.get("LOCALSPEC_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "localspec"


def installed_llama_cpp_python() -> str | None:
    """Version of the installed llama-cpp-python: the peer is built per version, because a
    peer from other llama.cpp sources would compare kernels, not decoding strategies."""
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None


def peer_dir(version: str | None = None) -> Path:
    """Where the build script puts the binaries; LOCALSPEC_PEER_DIR overrides (own builds)."""
    env = os.environ.get("LOCALSPEC_PEER_DIR")
    if env:
        return Path(env).expanduser()
    version = version or installed_llama_cpp_python() or "unknown"
    return _home_dir() / "peer" / version / "bin"


def peer_binaries(version: str | None = None) -> dict[str, Path] | None:
    """{'llama-speculative-simple': path, 'llama-bench': path}, or None when not built.

    None (not an exception) because the peer is an optional column: the bench simply
    leaves it out when the user has not run the build script.
    """
    d = peer_dir(version)
    found = {name: d / name for name in (SPEC_BIN, BENCH_BIN)}
    if all(p.is_file() and os.access(p, os.X_OK) for p in found.values()):
        return found
    return None


def require_peer_binaries(version: str | None = None) -> dict[str, Path]:
    """Like peer_binaries() but raises an error that names the fix."""
    bins = peer_binaries(version)
    if bins is None:
        raise PeerNotBuiltError(
            f"llama.cpp peer binaries ({SPEC_BIN}, {BENCH_BIN}) not found in {peer_dir(version)}; "
            f"build them with `{BUILD_SCRIPT}` (a few minutes on 2 cores, needs cmake and a "
            "C++ compiler), or point LOCALSPEC_PEER_DIR at a directory holding them"
        )
    return bins


def peer_tool(name: str, version: str | None = None) -> Path | None:
    """One peer binary by name (e.g. SERVER_BIN), or None when it is not built.

    Separate from peer_binaries(): llama-server came later than the other two, so a cache
    built before it still serves `bench speed` while `bench serve` reports what is missing.
    """
    path = peer_dir(version) / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def require_peer_tool(name: str, version: str | None = None) -> Path:
    """Like peer_tool() but raises an error that names the fix."""
    path = peer_tool(name, version)
    if path is None:
        raise PeerNotBuiltError(f"{name} not built: run {BUILD_SCRIPT} (looked in {peer_dir(version)})")
    return path


def peer_version(binary: Path) -> str:
    """llama.cpp version line (e.g. '0.5.0-dev (build 1, commit 0c1e570)') for result files."""
    out = run_tool([str(binary), "--version"], timeout=30.0)
    m = re.search(r"version:\s*(.+)", out.stdout + out.stderr)
    return m.group(1).strip() if m else "unknown"


# --------------------------------------------------------------------------- prompts


def to_peer_prompt(prompt_text: str, *, add_bos: bool, bos_text: str) -> str:
    """The text to hand llama-speculative-simple so it sees exactly localspec's prompt tokens.

    The tool tokenizes `-p` with add_special=True and parse_special=True: template markers
    become single tokens (as in localspec), and BOS is prepended whenever the model's
    metadata says add_bos. localspec prepends BOS only when the rendered template does not
    already start with it, so a template that renders `{{ bos_token }}` would get TWO BOS in
    the peer. Stripping that leading BOS text here makes both token sequences identical.
    """
    if add_bos and bos_text and prompt_text.startswith(bos_text):
        return prompt_text[len(bos_text) :]
    return prompt_text


# --------------------------------------------------------------------------- speculative


@dataclass
class PeerResult:
    """One llama-speculative-simple run.

    tok_per_s is the tool's own "decoded ... speed": generated tokens / wall time of the
    decode loop (draft + verify + sampling), excluding model load and prompt processing, the
    same span localspec's tok/s covers. n_predict can exceed the request by up to the draft
    length: the tool stops only after the iteration that crosses it.
    """

    tok_per_s: float
    n_drafted: int
    n_accepted: int
    n_predict: int
    seconds: float
    raw_cmd: list[str]
    stdout_tail: str
    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    wall_seconds: float = 0.0
    draft_max: int = 0
    text: str | None = None
    # (tokens so far, seconds into the decode loop) after each pass (peer_timeline.py)
    timeline: list[tuple[int, float]] = field(default_factory=list)

    def at(self, n: int) -> tuple[float, int, float]:
        """(tok/s, tokens, seconds) over the first n tokens, as localspec counts its own: the
        tool's own figure covers every token of its last pass, up to 64 past n
        (peer_timeline.py); that figure where the run ended before n or has no timeline."""
        got = speed_at(self.timeline, n)
        if got is None or got[1] <= 0.0:
            return self.tok_per_s, self.n_predict, self.seconds
        return got[0] / got[1], got[0], got[1]

    @property
    def acceptance(self) -> float:
        """Accepted / drafted draft tokens (llama.cpp's 'accept' line, as a fraction)."""
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def command(self) -> str:
        """Copy-pasteable shell command (for result files: 'the exact command')."""
        return shlex.join(self.raw_cmd)


_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|nan|inf|-nan)"
_ENCODED = re.compile(rf"encoded\s+(\d+)\s+tokens in\s+{_NUM}\s+seconds, speed:\s+{_NUM}\s+t/s")
_DECODED = re.compile(rf"decoded\s+(\d+)\s+tokens in\s+{_NUM}\s+seconds, speed:\s+{_NUM}\s+t/s")
_KV = re.compile(r"\b(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(-?\d+)")


def parse_speculative_output(output: str) -> dict[str, float]:
    """Numbers from llama-speculative-simple's summary (stderr, possibly mixed with stdout).

    Lines carry a log prefix such as '0.02.275.228 I ', so patterns are not anchored.
    Raises PeerRunError when the summary is missing (crash, or an incompatible version).
    """
    dec = _DECODED.search(output)
    kv = dict(_KV.findall(output))
    missing = [k for k in ("n_drafted", "n_accept") if k not in kv]
    if dec is None or missing:
        what = "the 'decoded ... t/s' line" if dec is None else ", ".join(missing)
        raise PeerRunError(
            f"could not find {what} in {SPEC_BIN}'s output (crashed, or a llama.cpp version "
            f"whose output format changed); tail:\n{output[-TAIL_CHARS:]}"
        )
    res: dict[str, float] = {
        "n_predict": int(dec.group(1)),
        "seconds": float(dec.group(2)),
        "tok_per_s": float(dec.group(3)),
        "n_drafted": int(kv["n_drafted"]),
        "n_accepted": int(kv["n_accept"]),
        "draft_max": int(kv.get("n_draft", 0)),
    }
    enc = _ENCODED.search(output)
    if enc:
        res["prompt_tokens"] = int(enc.group(1))
        res["prompt_seconds"] = float(enc.group(2))
    return res


def extract_generated_text(stdout: str, prompt: str) -> str | None:
    """Best-effort generated text: stdout is '\\n\\n' + prompt echo + answer + '\\n\\n\\n\\n'.

    The echo is the prompt's token pieces; it equals the prompt when tokenization
    round-trips (a BOS piece may precede it). None when the echo cannot be located, so a
    caller comparing texts (greedy: peer == localspec) knows not to trust it.
    """
    body = stdout.removeprefix("\n\n")
    i = body.find(prompt) if prompt else 0
    if i < 0:
        return None
    body = body[i + len(prompt) :]
    return body.removesuffix("\n\n").removesuffix("\n\n")


# llama.cpp's plain loop in the same tool: `--spec-type none` fails to initialise there, so
# "none" runs ngram-simple with the longest n-gram and draft it takes (1024 + 1024): it never
# drafts while prompt and answer hold at most PLAIN_MAX_TOKENS tokens (common_ngram_simple_draft
# returns before searching), and every step is one plain decode through the same loop as the
# other settings. A run that drafted anyway is refused (run_speculative_simple).
PLAIN = "none"
_PLAIN_NGRAM = 1024  # the longest n-gram and m-gram llama.cpp's arg.cpp accepts
PLAIN_ARGS = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(_PLAIN_NGRAM),
              "--spec-ngram-simple-size-m", str(_PLAIN_NGRAM))
PLAIN_MAX_TOKENS = 2 * _PLAIN_NGRAM + 1  # common_ngram_simple_draft needs more tokens than n + m + 1


def spec_type_args(spec_type: str) -> list[str]:
    """The flags that select `spec_type` (PLAIN: llama.cpp's plain loop, as above)."""
    return list(PLAIN_ARGS) if spec_type == PLAIN else ["--spec-type", spec_type]


def build_speculative_cmd(
    binary: Path | str,
    target: Path,
    draft: Path,
    prompt: str,
    *,
    n_predict: int,
    threads: int,
    draft_max: int,
    draft_min: int,
    p_min: float,
    temp: float = 0.0,
    seed: int = 42,
    ctx_size: int = 4096,
    top_k: int = 40,
    top_p: float = 0.95,
    min_p: float = 0.05,
    extra_args: Sequence[str] = (),
    spec_type: str = "draft-simple",
    json_schema: str | None = None,
) -> list[str]:
    """The command line, flag names as in the vendored llama.cpp (common/arg.cpp).

    Notes that matter for a fair run: `--spec-type draft-simple` is required in this
    llama.cpp (without it '-md' loads the draft but speculation fails to initialize);
    `--no-escape` because escape processing is ON by default and would turn a code
    prompt's backslashes into control characters; one thread count for target, draft,
    generation and batch, as localspec uses; sampler defaults equal localspec's.
    `json_schema` (JSON text): the answer must match it (llama.cpp's `--json-schema`, which
    compiles it to a GBNF grammar for the target's sampler), as localspec's constrained runs.
    """
    t = str(threads)
    # draft-mtp drafts with the target's own head: a -md would load a second copy as the draft
    uses_draft = any(kind.startswith("draft") and kind != "draft-mtp" for kind in spec_type.split(","))
    return [
        str(binary),
        "-m", str(target),
        *(["-md", str(draft)] if uses_draft else []),
        *spec_type_args(spec_type),
        "-p", prompt,
        "--no-escape",
        "-n", str(n_predict),
        "-c", str(ctx_size),
        "-b", str(ctx_size),  # its prompt is one batch: a 2269-token edit failed at the default 2048
        "-t", t, "-tb", t, "-td", t, "-tbd", t,
        "--spec-draft-n-max", str(draft_max),
        "--spec-draft-n-min", str(draft_min),
        "--spec-draft-p-min", repr(float(p_min)),
        "--temp", repr(float(temp)),
        "--top-k", str(top_k),
        "--top-p", repr(float(top_p)),
        "--min-p", repr(float(min_p)),
        "-s", str(seed),
        *(["--json-schema", json_schema] if json_schema is not None else []),
        *LOG_ARGS,  # a timestamped line per pass: its speed over the first n tokens (peer_timeline.py)
        *extra_args,
    ]  # fmt: skip


def run_speculative_simple(
    target: Path, draft: Path, prompt: str, n_predict: int, threads: int, draft_max: int, draft_min: int,
    p_min: float, temp: float = 0.0, seed: int = 42, *, timeout: float = 900.0, **options: Any,
) -> PeerResult:
    """Run llama.cpp's speculative loop once on an already chat-templated prompt.

    `options` go to build_speculative_cmd (ctx_size, top_k, top_p, min_p, extra_args,
    spec_type, json_schema).
    `prompt` is raw text (pass it through to_peer_prompt()); the tool does not apply a chat
    template itself. Raises PeerNotBuiltError / PeerRunError with messages naming the fix.
    """
    for p in (target, draft):
        if not Path(p).is_file():
            raise PeerRunError(f"model file not found: {p}")
    binary = require_peer_binaries()[SPEC_BIN]
    cmd = build_speculative_cmd(
        binary, target, draft, prompt, n_predict=n_predict, threads=threads, draft_max=draft_max,
        draft_min=draft_min, p_min=p_min, temp=temp, seed=seed, **options,
    )  # fmt: skip
    t0 = time.perf_counter()
    out = run_tool(cmd, timeout=timeout)
    wall = time.perf_counter() - t0
    both = out.stdout + "\n" + out.stderr
    if out.returncode != 0:
        raise PeerRunError(
            f"{SPEC_BIN} exited with code {out.returncode}; tail:\n{both[-TAIL_CHARS:]}"
        )
    logs = out.stderr + "\n" + out.stdout  # -lv 5: hundreds of KB of load logs, joined once
    nums = parse_speculative_output(logs)
    if options.get("spec_type") == PLAIN and nums["n_drafted"]:
        raise PeerRunError(f"llama.cpp's plain loop ({PLAIN}) drafted {int(nums['n_drafted'])} tokens: prompt and "
                           f"answer exceed {PLAIN_MAX_TOKENS} tokens, where its never-matching n-gram can match")
    return PeerResult(
        tok_per_s=nums["tok_per_s"],
        n_drafted=int(nums["n_drafted"]),
        n_accepted=int(nums["n_accepted"]),
        n_predict=int(nums["n_predict"]),
        seconds=nums["seconds"],
        raw_cmd=cmd,
        stdout_tail=both[-TAIL_CHARS:],
        prompt_tokens=int(nums.get("prompt_tokens", 0)),
        prompt_seconds=nums.get("prompt_seconds", 0.0),
        wall_seconds=wall,
        draft_max=int(nums["draft_max"]),
        text=extract_generated_text(out.stdout, prompt),
        timeline=timeline(logs, nums["seconds"]),
    )


# --------------------------------------------------------------------------- helpers


def run_tool(cmd: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """subprocess.run with errors turned into messages (bytes decoded leniently: a model
    may emit invalid UTF-8 mid-character)."""
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, encoding="utf-8", errors="replace",
            timeout=timeout, check=False,
        )  # fmt: skip
    except FileNotFoundError:
        raise PeerNotBuiltError(f"{cmd[0]} not found; build it with `{BUILD_SCRIPT}`") from None
    except PermissionError:
        raise PeerRunError(
            f"{cmd[0]} is not executable; rebuild with `{BUILD_SCRIPT} --force`"
        ) from None
    except subprocess.TimeoutExpired:
        raise PeerRunError(
            f"{Path(cmd[0]).name} ran over {timeout:.0f} s: {shlex.join(cmd)}"
        ) from None
