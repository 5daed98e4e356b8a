"""`localspec models ...` through the same argparse wiring the main CLI uses.

Exit code 2 and a one-line message (no traceback) for bad input; the lead's subprocess
smoke tests cover the installed `localspec` entry point.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from localspec.cli.models import run
from localspec.models import check_gguf

ROOT = Path(__file__).resolve().parents[1]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = run(["models", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("localspec: error:"), err
    assert "Traceback" not in err
    return lines[0]


def test_missing_path_exit_2(capsys, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such.gguf"
    rc, out, err = cli(capsys, "path", str(missing))
    assert rc == 2 and out == ""
    msg = one_line_error(err)
    assert str(missing) in msg and "localspec models list" in msg


def test_non_gguf_exit_2(capsys, tmp_path: Path) -> None:
    p = tmp_path / "readme.gguf"
    p.write_text("just text, long enough to pass the minimum size check\n")
    rc, _, err = cli(capsys, "verify", str(p))
    assert rc == 2 and "GGUF magic" in one_line_error(err)


def test_truncated_exit_2(capsys, make_gguf) -> None:
    p = make_gguf()
    p.write_bytes(p.read_bytes()[:-64])
    rc, _, err = cli(capsys, "path", str(p))
    assert rc == 2 and "truncated" in one_line_error(err)


def test_unknown_name_exit_2(capsys) -> None:
    rc, _, err = cli(capsys, "fetch", "qwen2.5-coder-1.5", "--quiet")
    assert rc == 2 and "Did you mean" in one_line_error(err)


def test_list_shows_models_and_default_pair(capsys) -> None:
    rc, out, _ = cli(capsys, "list")
    assert rc == 0
    assert "qwen2.5-coder-1.5b <- qwen2.5-coder-0.5b" in out
    assert "smollm2-135m" in out and "STATUS" in out


def test_help_teaches(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        run(["models", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "LOCALSPEC_HOME" in out and "sha256" in out


def test_fetch_path_verify_roundtrip(capsys, local_registry, make_gguf) -> None:
    src = make_gguf("src.gguf")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    local_registry(f"""
[pairs.default]
target = "m"
draft = "m"
[models.m]
file = "m.gguf"
sha256 = "{digest}"
[[models.m.sources]]
type = "file"
path = "{src}"
""")
    rc, out, _ = cli(capsys, "fetch", "m", "-q")
    assert rc == 0 and out.startswith("m: ")
    cached = Path(out.split(": ", 1)[1].strip())
    rc, out, _ = cli(capsys, "path", "m", "-q")
    assert rc == 0 and out.strip() == str(cached)
    rc, out, _ = cli(capsys, "verify", "m", "-q")
    assert rc == 0 and "ok" in out
    data = bytearray(cached.read_bytes())
    data[-3] ^= 0xFF
    cached.write_bytes(bytes(data))
    rc, _, err = cli(capsys, "verify", "m", "-q")
    assert rc == 2 and "fetch --force m" in one_line_error(err)
    rc, out, _ = cli(capsys, "path", "m", "-q")  # corrupt -> fetched again
    assert rc == 0 and hashlib.sha256(cached.read_bytes()).hexdigest() == digest


def test_fetch_from_local_copy(capsys, local_registry, make_gguf, tmp_path) -> None:
    src = make_gguf("src.gguf")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    local_registry(f"""
[pairs.default]
target = "m"
draft = "m"
[models.m]
file = "m.gguf"
sha256 = "{digest}"
[[models.m.sources]]
type = "file"
path = "{tmp_path / 'not-here.gguf'}"
""")
    rc, _, err = cli(capsys, "fetch", "m", "-q")
    assert rc == 2 and "not-here.gguf" in one_line_error(err)
    rc, out, _ = cli(capsys, "fetch", "m", "-q", "--from", str(src))
    assert rc == 0


def test_quantize_cli(capsys, smollm2_path: Path, tmp_path: Path) -> None:
    out_path = tmp_path / "smol-q8.gguf"
    rc, out, err = cli(capsys, "quantize", str(smollm2_path), "--type", "q8_0",
                       "--out", str(out_path), "-q")
    assert rc == 0, err
    info = check_gguf(out_path)
    assert "Q8_0" in info.tensor_types and "Q4_1" not in info.tensor_types
    rc, _, err = cli(capsys, "quantize", str(smollm2_path), "--type", "Q8_0",
                     "--out", str(out_path), "-q")
    assert rc == 2 and "--force" in one_line_error(err)
    pure_path = tmp_path / "smol-q4_0-pure.gguf"
    rc, out, err = cli(capsys, "quantize", str(smollm2_path), "--type", "Q4_0", "--pure",
                       "--out", str(pure_path), "-q")
    assert rc == 0, err
    assert set(check_gguf(pure_path).tensor_types) == {"Q4_0", "F32"}
    rc, _, err = cli(capsys, "quantize", str(smollm2_path), "--type", "Q9_9", "-q")
    assert rc == 2 and "Q4_0" in one_line_error(err)


def test_download_script_uses_same_code(local_registry, make_gguf) -> None:
    src = make_gguf("src.gguf")
    local_registry(f"""
[pairs.default]
target = "m"
draft = "m"
[models.m]
file = "m.gguf"
[[models.m.sources]]
type = "file"
path = "{src}"
""")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "download_models.py"),
                           "--quiet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("m: ")
