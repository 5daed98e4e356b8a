"""Every bad input a newcomer can type, through the real CLI in a subprocess.

The contract (README): bad input is one line on stderr and exit code 2 — no traceback, no
13 lines of usage, no llama.cpp abort (exit 134) — and the line names the flag or file at
fault. The flag cases fail before any model loads, so each costs one interpreter start.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

M = "{model}"  # replaced by the SmolLM2 path (a real, cached GGUF)
LATIN1 = b"caf\xe9 au lait"  # 'café' in Latin-1: 0xe9 at byte offset 3

# (case id, argv (str or bytes items), substrings the one stderr line must contain)
CASES: list[tuple[str, list[str | bytes], list[str]]] = [
    # argparse errors: one line with a hint, not the usage block
    ("method-nonsense", ["run", "-m", M, "-p", "hi", "--method", "nonsense"],
     ["--method", "invalid choice", "localspec run --help"]),
    ("batch-not-int", ["run", "-m", M, "-p", "hi", "-b", "x"], ["--batch", "invalid int"]),
    ("prompt-and-file", ["run", "-m", M, "-p", "hi", "-f", "{latin1}"], ["not allowed with"]),
    ("models-fetch-no-name", ["models", "fetch"], ["required", "NAME"]),
    # --batch: llama.cpp's GGML_ASSERT(n_outputs_max <= ...) for anything below 16
    ("batch-0-ar", ["run", "-m", M, "-p", "hi", "--method", "ar", "-b", "0"], ["--batch 0", "16"]),
    ("batch-1-ar", ["run", "-m", M, "-p", "hi", "--method", "ar", "-b", "1"], ["--batch 1", "16"]),
    ("batch-12-ar", ["run", "-m", M, "-p", "hi", "--method", "ar", "-b", "12"], ["--batch 12", "16"]),
    ("batch-15-ar", ["run", "-m", M, "-p", "hi", "--method", "ar", "-b", "15"], ["--batch 15", "16"]),
    ("batch-negative", ["run", "-m", M, "-p", "hi", "--method", "ar", "-b", "-8"], ["--batch -8"]),
    ("batch-4-sd", ["run", "-m", M, "-md", M, "-p", "hi", "--method", "sd", "-b", "4"], ["--batch 4", "16"]),
    ("batch-below-KxL", ["run", "-m", M, "-md", M, "-p", "hi", "--method", "mdbv", "-K", "3", "-L", "8",
                         "-b", "20"], ["--batch 20", "26", "-K 3 x -L 8"]),
    ("draft-len-over-batch", ["run", "-m", M, "-md", M, "-p", "hi", "--method", "sd", "-L", "600"],
     ["--batch 512", "602", "-L 600"]),
    ("batch-below-auto", ["run", "-m", M, "-md", M, "-p", "hi", "-b", "32"], ["--batch 32", "64", "auto"]),
    ("batch-below-parse-prompt", ["run", "-m", M, "-md", M, "-p", "hi", "--method", "parse",
                                  "--parse-judge", "prompt", "-b", "40"], ["--batch 40", "PARSE"]),
    ("batch-too-big", ["run", "-m", M, "-p", "hi", "--method", "ar", "-b", str(2**31)], ["--batch"]),
    ("chat-batch-4", ["chat", "--plain", "-m", M, "-md", M, "-b", "4"], ["--batch 4"]),
    # --ctx / --threads / other numbers
    ("ctx-negative", ["run", "-m", M, "-p", "hi", "-c", "-1"], ["--ctx", "0 = the model's"]),
    ("ctx-below-batch-min", ["run", "-m", M, "-p", "hi", "--method", "ar", "-c", "8"], ["--ctx 8", "16"]),
    ("rs-snapshots-negative", ["run", "-m", M, "-p", "hi", "--rs-snapshots", "-1"], ["--rs-snapshots", "-1"]),
    ("threads-negative", ["run", "-m", M, "-p", "hi", "-t", "-1"], ["--threads", "-1"]),
    ("threads-huge", ["run", "-m", M, "-p", "hi", "-t", "100000"], ["--threads", "100000"]),
    ("K-0", ["run", "-m", M, "-p", "hi", "-K", "0"], ["-K/--drafts"]),
    ("K-too-many", ["run", "-m", M, "-md", M, "-p", "hi", "--method", "mdbv", "-K", "16", "-L", "2"],
     ["-K/--drafts 16", "15"]),
    ("L-0", ["run", "-m", M, "-p", "hi", "-L", "0"], ["-L/--draft-len"]),
    ("n-0", ["run", "-m", M, "-p", "hi", "-n", "0"], ["-n/--n-predict"]),
    ("n-negative", ["run", "-m", M, "-p", "hi", "-n", "-5"], ["-n/--n-predict"]),
    ("temp-negative", ["run", "-m", M, "-p", "hi", "--temp", "-1"], ["--temp"]),
    ("temp-nan", ["run", "-m", M, "-p", "hi", "--temp", "nan"], ["--temp", "nan"]),
    ("temp-inf", ["run", "-m", M, "-p", "hi", "--temp", "inf"], ["--temp", "inf"]),
    ("draft-temp-negative", ["run", "-m", M, "-p", "hi", "--draft-temp", "-0.5"], ["--draft-temp"]),
    ("top-k-negative", ["run", "-m", M, "-p", "hi", "--top-k", "-1"], ["--top-k"]),
    ("top-p-0", ["run", "-m", M, "-p", "hi", "--top-p", "0"], ["--top-p"]),
    ("top-p-1.5", ["run", "-m", M, "-p", "hi", "--top-p", "1.5"], ["--top-p"]),
    ("min-p-1", ["run", "-m", M, "-p", "hi", "--min-p", "1"], ["--min-p"]),
    ("seed-negative", ["run", "-m", M, "-p", "hi", "--seed", "-1"], ["--seed"]),
    ("parse-cuts-0", ["run", "-m", M, "-md", M, "-p", "hi", "--method", "parse", "--parse-cuts", "0"],
     ["--parse-cuts"]),
    ("parse-min-seg-0", ["run", "-m", M, "-md", M, "-p", "hi", "--method", "parse", "--parse-min-seg", "0"],
     ["--parse-min-seg"]),
    ("parse-gamma-negative", ["run", "-m", M, "-p", "hi", "--parse-gamma", "-1"], ["--parse-gamma"]),
    ("parse-threshold-nan", ["run", "-m", M, "-p", "hi", "--parse-threshold", "nan"], ["--parse-threshold"]),
    ("method-needs-draft", ["run", "-m", M, "-p", "hi", "--method", "sd"], ["--method sd", "draft"]),
    # prompts: the UTF-8 rule, empty prompts
    ("prompt-not-utf8", ["run", "-m", M, "--method", "ar", "-p", LATIN1],
     ["-p/--prompt", "UTF-8", "0xe9", "offset 3"]),
    ("file-not-utf8", ["run", "-m", M, "--method", "ar", "-f", "{latin1}"], ["latin1.txt", "UTF-8", "offset 3"]),
    ("stop-not-utf8", ["run", "-m", M, "--method", "ar", "-p", "hi", "--stop", LATIN1], ["--stop", "UTF-8"]),
    ("stop-empty", ["run", "-m", M, "--method", "ar", "-p", "hi", "--stop", ""], ["--stop"]),
    ("prompt-empty", ["run", "-m", M, "--method", "ar", "-p", ""], ["empty prompt"]),
    ("prompt-empty-raw", ["run", "-m", M, "--method", "ar", "--raw", "-p", ""], ["empty prompt"]),
    ("prompt-whitespace", ["run", "-m", M, "--method", "ar", "--raw", "-p", " \n\t"], ["whitespace"]),
    ("file-empty", ["run", "-m", M, "--method", "ar", "-f", "{empty}"], ["empty.txt", "empty"]),
    ("file-missing", ["run", "-m", M, "--method", "ar", "-f", "{missing}"], ["cannot read", "missing.txt"]),
    ("no-prompt", ["run", "-m", M, "--method", "ar"], ["--prompt"]),
    ("stdin-empty", ["run", "-m", M, "--method", "ar", "-f", "-"], ["stdin", "empty"]),
    ("model-missing", ["run", "-m", "{missing_gguf}", "-p", "hi", "--method", "ar"], ["nope.gguf"]),
    # constrained output (--grammar, --grammar-file, -j/--json-schema, --json-schema-file): checked
    # before any model loads, so the model named here ({missing_gguf}) is never looked at
    ("constraint-grammar-bad", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar", "root ::= foo"],
     ["--grammar", "GBNF grammar", "Rule 'foo' not found"]),
    ("constraint-grammar-unclosed", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar", "root ::= [a-z"],
     ["--grammar", "GBNF grammar"]),
    ("constraint-grammar-empty", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar", " "],
     ["--grammar", "empty"]),
    ("constraint-grammar-not-utf8", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar", b"root ::= \"" + LATIN1 + b"\""],
     ["--grammar", "UTF-8", "0xe9"]),
    ("constraint-schema-bad-type", ["run", "-m", "{missing_gguf}", "-p", "hi", "-j", '{{"type": "foo"}}'],
     ["-j/--json-schema", "JSON schema", "Invalid type: foo"]),
    ("constraint-schema-not-json", ["run", "-m", "{missing_gguf}", "-p", "hi", "--json-schema", "{{type: object}}"],
     ["-j/--json-schema", "not valid JSON"]),
    ("constraint-schema-unsupported", ["run", "-m", "{missing_gguf}", "-p", "hi", "-j", '{{"not": {{"type": "null"}}}}'],
     ["-j/--json-schema", "JSON schema", "not"]),
    ("constraint-schema-remote-ref", ["run", "-m", "{missing_gguf}", "-p", "hi", "-j", '{{"$ref": "https://x.invalid/s.json"}}'],
     ["-j/--json-schema", "x.invalid"]),
    ("constraint-grammar-file-missing", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar-file", "{missing}"],
     ["--grammar-file", "missing.txt", "cannot read"]),
    ("constraint-grammar-file-not-utf8", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar-file", "{latin1}"],
     ["--grammar-file", "latin1.txt", "UTF-8", "offset 3"]),
    ("constraint-grammar-file-empty", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar-file", "{empty}"],
     ["--grammar-file", "empty.txt", "empty"]),
    ("constraint-grammar-file-dir", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar-file", "{dir}"],
     ["--grammar-file", "cannot read", "directory"]),
    ("constraint-schema-file-missing", ["run", "-m", "{missing_gguf}", "-p", "hi", "--json-schema-file", "{missing}"],
     ["--json-schema-file", "missing.txt", "cannot read"]),
    ("constraint-schema-file-bad", ["run", "-m", "{missing_gguf}", "-p", "hi", "--json-schema-file", "{bad_schema}"],
     ["--json-schema-file", "bad_schema.json", "JSON schema", "Invalid type"]),
    ("constraint-two-flags", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar", 'root ::= "a"', "-j", "{{}}"],
     ["--grammar", "-j/--json-schema", "not allowed with"]),
    ("constraint-two-files", ["run", "-m", "{missing_gguf}", "-p", "hi", "--grammar-file", "{missing}",
                              "--json-schema-file", "{missing}"], ["--grammar-file", "--json-schema-file", "not allowed with"]),
    ("constraint-chat", ["chat", "--plain", "-m", "{missing_gguf}", "--grammar", "root ::= foo"],
     ["--grammar", "Rule 'foo' not found"]),
    ("constraint-serve", ["serve", "-m", "{missing_gguf}", "--port", "1", "-j", '{{"type": "foo"}}'],
     ["-j/--json-schema", "Invalid type: foo"]),
    # models fetch --from: only the named file is tried; nothing downloaded instead
    ("fetch-from-bad-file", ["models", "fetch", "m", "-q", "--from", "{bad_gguf}"], ["--from", "not tried"]),
    ("fetch-from-missing", ["models", "fetch", "m", "-q", "--from", "{missing_gguf}"],
     ["--from", "does not exist"]),
]


def fill(arg: str | bytes, names: dict[str, str]) -> str | bytes:
    return arg if isinstance(arg, bytes) else arg.format(**names)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> dict[str, str]:
    d = tmp_path_factory.mktemp("badinput")
    (d / "latin1.txt").write_bytes(LATIN1 + b"\n")
    (d / "empty.txt").write_bytes(b"")
    (d / "bad.gguf").write_bytes(b"this is not a model\n" * 10)
    (d / "bad_schema.json").write_text('{"type": "foo"}\n')
    return {"model": str(smollm2_path), "latin1": str(d / "latin1.txt"), "empty": str(d / "empty.txt"),
            "missing": str(d / "missing.txt"), "missing_gguf": str(d / "nope.gguf"),
            "bad_gguf": str(d / "bad.gguf"), "bad_schema": str(d / "bad_schema.json"), "dir": str(d)}


@pytest.mark.parametrize("case,argv,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(case: str, argv: list[str | bytes], expect: list[str],
                                          files: dict[str, str], local_registry, make_gguf,
                                          tmp_path: Path) -> None:
    # `models fetch m`: a registry whose own source is a VALID file, so falling back to it
    # (what `--from BADFILE` used to do with the network) would succeed and exit 0
    good = make_gguf("good.gguf")
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    local_registry('[pairs.default]\ntarget = "m"\ndraft = "m"\n'
                   f'[models.m]\nfile = "m.gguf"\nsize = {good.stat().st_size}\nsha256 = "{digest}"\n'
                   f'[[models.m.sources]]\ntype = "file"\npath = "{good}"\n')
    cmd = [sys.executable.encode(), b"-m", b"localspec.cli",
           *[os.fsencode(fill(a, files)) for a in argv]]
    r = subprocess.run(cmd, input=b"", capture_output=True, timeout=120)  # stdin: empty, never a tty
    err = r.stderr.decode("utf-8", "replace")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert r.returncode == 2, (case, r.returncode, err)
    assert "Traceback" not in err and "GGML_ASSERT" not in err, err
    assert len(lines) == 1, (case, lines)
    assert "error" in lines[0], lines[0]
    for s in expect:
        assert s in lines[0], (case, s, lines[0])
    if case.startswith("batch-0"):
        assert "--ctx" not in lines[0]  # the old, wrong advice
    if case.startswith("constraint-"):
        assert "nope.gguf" not in lines[0]  # refused before the (missing) model is looked at
    if case.startswith("fetch-from"):
        assert not (tmp_path / "home" / "models" / "m.gguf").exists()  # no fallback


def cli(*args: str, stdin: str | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localspec.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def test_batch_at_the_minimum_runs(smollm2_path: Path) -> None:
    """The minimum the refusals name is real: --batch 16 runs AR (15 aborted llama.cpp)."""
    r = cli("run", "-m", str(smollm2_path), "-p", "Say hi.", "-n", "3", "--method", "ar", "-b", "16", "-t", "1")
    assert r.returncode == 0, r.stderr
    assert "tok/s" in r.stderr


def test_ctx_0_and_threads_0_mean_what_llama_cpp_means(smollm2_path: Path) -> None:
    r = cli("run", "-m", str(smollm2_path), "-p", "Say hi.", "-n", "2", "--method", "ar", "-c", "0", "-t", "0")
    assert r.returncode == 0, r.stderr
    assert "--ctx 0" in r.stderr and "training length" in r.stderr  # said, not silent


def test_context_refuses_a_batch_below_its_sequences(smollm2_path: Path) -> None:
    """Second line of defence for frontends that bypass the CLI (bench, server)."""
    from localspec.backend import Context, Model
    from localspec.errors import ConfigError

    with pytest.raises(ConfigError, match="--batch 8"):
        Context(Model(str(smollm2_path)), n_ctx=256, n_batch=8, n_seq_max=16, threads=1)
    with pytest.raises(ConfigError, match="--ctx 4"):
        Context(Model(str(smollm2_path)), n_ctx=4, n_batch=64, n_seq_max=16, threads=1)


def test_chat_without_a_terminal_says_it_uses_the_plain_repl(smollm2_path: Path) -> None:
    r = cli("chat", "-m", str(smollm2_path), "--method", "ar", "-n", "3", "-t", "1", stdin="hi\n")
    assert r.returncode == 0, r.stderr
    first = r.stderr.splitlines()[0]
    assert "stdout" in first and "not terminals" in first and "plain line REPL" in first


def test_run_help_shows_each_default_once_and_examples() -> None:
    r = cli("run", "--help")
    assert r.returncode == 0
    out = r.stdout
    for line in out.splitlines():
        assert line.lower().count("default") <= 1, line
    assert "(default: None)" not in out and "(default: False)" not in out
    assert "(default: 256)" in out  # -n: a default not in its help text is appended once
    assert "examples:" in out and out.count("localspec run -m") >= 3
    assert "UTF-8" in out  # the prompt rule is documented
    r = cli("chat", "--help")
    assert r.returncode == 0 and "examples:" in r.stdout


def test_argparse_error_is_one_line_in_process(capsys) -> None:
    from localspec.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["run", "--method", "nonsense"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err


def test_stdin_closed_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """`run -f -` with file descriptor 0 closed (`<&-`): Python's sys.stdin is None, which
    was an AttributeError traceback; checked before any model loads (none is named here)."""
    cmd = [sys.executable, "-m", "localspec.cli", "run", "-m", str(tmp_path / "none.gguf"), "-f", "-"]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: os.close(0))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and lines[0].startswith("error:") and "stdin is closed" in lines[0], lines
