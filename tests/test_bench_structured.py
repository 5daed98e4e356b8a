"""bench speed's structured-output set: the shipped rows (schemas, halves), the constraint
every column decodes under (AR included), llama.cpp's `--json-schema`, the forced-share and
per-drafter acceptance summary, and one short real run on SmolLM2."""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.bench import peer
from localspec.bench.common import HALVES, Prompt, load_prompts, read_jsonl
from localspec.bench.runner import PEER, Job, Run, Runner, Spec
from localspec.bench.speed import constrained, parse_grid, pooled_proposers
from localspec.config import GenConfig
from localspec.constrain.spec import ConstraintSpec
from localspec.errors import LocalspecError
from localspec.events import Done, Event, Stats, Written

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}  # fmt: skip


def _walk(node: object) -> Iterator[dict]:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


# --------------------------------------------------------------------------- the set


def test_structured_rows_load_with_their_schema_and_half() -> None:
    rows = read_jsonl("structured")
    assert len(rows) >= 16 and len({r["id"] for r in rows}) == len(rows)
    assert all(set(r) == {"id", "kind", "half", "prompt", "schema"} and r["kind"] == "structured" for r in rows)
    prompts = load_prompts(None, ["structured"])
    assert [p.id for p in prompts] == [r["id"] for r in rows]
    for p, r in zip(prompts, rows, strict=True):
        assert p.dataset == "structured" and p.chat and p.text == r["prompt"]
        assert isinstance(p.schema, dict) and p.schema == r["schema"] and p.half == r["half"]
        c = p.constraint
        assert c is not None and c.kind == "json_schema" and json.loads(c.text) == r["schema"]
        c.grammar()  # llguidance compiles every schema (else: one line naming the prompt)
    # the halves: 8 each, and each holds every shape the set is for
    for half in HALVES:
        mine = load_prompts(None, ["structured"], half=half)
        assert len(mine) == 8 and {p.half for p in mine} == {half}
        nodes = [n for p in mine for n in _walk(p.schema)]
        assert any("enum" in n for n in nodes) and any("const" in n for n in nodes)
        assert any(n.get("type") == "number" for n in nodes) and any(n.get("type") == "integer" for n in nodes)
        assert any(n.get("type") == "array" and n["items"].get("type") == "object" for n in nodes)
        assert sum(p.id.startswith("st-tool-") for p in mine) >= 2  # tool-call arguments
    # --limit counts after the kind and half filters
    assert [p.id for p in load_prompts(None, ["structured"], 2, "report")] == \
        [r["id"] for r in rows if r["half"] == "report"][:2]


def test_the_default_set_has_no_schema_and_structured_joins_only_when_asked() -> None:
    assert all(p.schema is None and p.constraint is None for p in load_prompts(None))
    mixed = load_prompts(None, ["code", "structured"])
    assert {p.dataset for p in mixed} == {"code", "structured"}
    # the speed set is not split: --half reads the split sets (tests/test_bench_split.py)
    assert all(p.id.startswith("code-he") for p in load_prompts(None, ["code"], half="tune"))


def test_llama_cpp_converts_every_schema() -> None:
    """llama-speculative-simple compiles `--json-schema` with llama.cpp's converter;
    llama-cpp-python ships its Python port: every shipped schema must go through it."""
    from llama_cpp import LlamaGrammar
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    for p in load_prompts(None, ["structured"]):
        assert p.schema_text is not None
        LlamaGrammar.from_string(json_schema_to_gbnf(p.schema_text), verbose=False)


# --------------------------------------------------------------------------- what each column gets


class Scripted:
    """Answers every generate() with a JSON text and grammar-forced counts; records configs."""

    bos_text = ""

    def __init__(self) -> None:
        self.configs: list[GenConfig] = []

    def forget_lookups(self) -> None:
        pass

    def render(self, messages, *, template_kwargs=None) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def generate(self, prompt, cfg: GenConfig, *, prefill: str = "", template_kwargs=None) -> Iterator[Event]:
        self.configs.append(cfg)
        ar = cfg.method == "ar"
        st = Stats(method=cfg.method, n_tokens=10, iterations=10 if ar else 3, target_calls=10 if ar else 3,
                   seconds=0.5, drafted=0 if ar else 9, accepted_lengths=[] if ar else [3, 2, 2],
                   constraint=cfg.constraint.kind if cfg.constraint else "",
                   proposed={} if ar else {"grammar": (4, 4)})
        yield Written((1,), '{"ok": true}', "target")
        yield Done("eog", '{"ok": true}', st)


def _args(**kw) -> argparse.Namespace:
    base = dict(n_predict=16, draft_temp=None, threads=2, ctx=512, peer_p_min=0.75, auto_free=True, temp=0.0)
    return argparse.Namespace(**{**base, **kw})


def test_every_column_of_a_structured_prompt_decodes_under_its_schema() -> None:
    p = Prompt("structured", "s1", "Is it ok?", schema=SCHEMA, half="tune")
    plain = Prompt("code", "c1", "Write code.")
    configs = parse_grid(["auto", "sd", "mdbv", "dyn", "sd+ngram"], ["1:4", "3:6"])
    methods = {c.method for c in configs}
    assert {"ar", "auto", "sd", "mdbv"} <= methods
    # Spec.gen: the constraint given is the one the GenConfig carries, for every spec
    want = ConstraintSpec("json_schema", json.dumps(SCHEMA), origin="prompt s1's schema")
    assert p.constraint == want
    for s in configs:
        g = s.gen(_args(), seed=0, constraint=p.constraint)
        assert g.constraint == want and g.method == s.method
        assert s.gen(_args(), seed=0).constraint is None
    # through the runner: every local run of the prompt, AR first, gets the same constraint
    sess = Scripted()
    runs, _ = Runner(sess, _args()).run_all([Job(p, configs, 0), Job(plain, configs, 1)], "test")
    n = len(configs)
    assert [c.method for c in sess.configs[:n]] == [s.method for s in configs] and configs[0].method == "ar"
    assert all(c.constraint == want for c in sess.configs[:n])
    assert all(c.constraint is None for c in sess.configs[n:])
    # the run record says what the stats said: the constraint's kind, forced tokens, drafters
    first = runs[1]
    assert first.extra["constraint"] == "json_schema" and first.extra["forced"] == 4
    assert first.extra["proposers"]["grammar"] == {"drafted": 4, "accepted": 4, "acceptance": 1.0}
    assert runs[0].extra["forced"] == 0 and runs[n].extra["constraint"] is None


def test_peer_command_line_carries_the_schema(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    text = json.dumps(SCHEMA)
    cmd = peer.build_speculative_cmd("/bin/spec", Path("t.gguf"), Path("d.gguf"), "hi", n_predict=8, threads=2,
                                     draft_max=16, draft_min=0, p_min=0.75, json_schema=text)
    assert cmd[cmd.index("--json-schema") + 1] == text  # one argv element, verbatim
    no = peer.build_speculative_cmd("/bin/spec", Path("t.gguf"), Path("d.gguf"), "hi", n_predict=8, threads=2,
                                    draft_max=16, draft_min=0, p_min=0.75)
    assert "--json-schema" not in no and "-j" not in no

    # the whole path: Runner.peer -> run_speculative_simple -> the argv the tool gets
    seen: list[list[str]] = []

    def fake_tool(c: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
        seen.append(c)
        err = "decoded 12 tokens in 0.500 seconds, speed: 24.000 t/s\nn_draft   = 16\nn_drafted = 10\nn_accept  = 6\n"
        return subprocess.CompletedProcess(c, 0, stdout="", stderr=err)

    models = (tmp_path / "t.gguf", tmp_path / "d.gguf")
    for m in models:
        m.write_bytes(b"")
    monkeypatch.setattr(peer, "require_peer_binaries", lambda version=None: {peer.SPEC_BIN: Path("/bin/spec")})
    monkeypatch.setattr(peer, "run_tool", fake_tool)
    runner = Runner(Scripted(), _args(), models)
    r = runner.peer(Prompt("structured", "s1", "Is it ok?", schema=SCHEMA), Spec(PEER, 1, 16), seed=3)
    assert seen[-1][seen[-1].index("--json-schema") + 1] == text
    assert r.extra["constraint"] == "json_schema" and (r.extra["drafted"], r.extra["accepted"]) == (10, 6)
    runner.peer(Prompt("code", "c1", "Write code."), Spec(PEER, 1, 16), seed=3)
    assert "--json-schema" not in seen[-1]


# --------------------------------------------------------------------------- the summary


def _run(label: str, method: str, prompt: str, tokens: int, forced: int | None, per: dict | None = None,
         **extra: object) -> Run:  # fmt: skip
    r = Run("structured", prompt, method, 1, 8, 0.0, 10.0, tokens, label=label)
    if forced is not None:
        r.extra = {"constraint": "json_schema", "forced": forced, "proposers": per or {}}
    r.extra.update(extra)
    return r


def test_forced_share_and_acceptance_per_drafter_are_pooled_over_prompts() -> None:
    def per(g: tuple[int, int], d: tuple[int, int]) -> dict:
        return {"ngram": {"drafted": 0, "accepted": 0, "acceptance": None},
                "grammar": {"drafted": g[0], "accepted": g[1], "acceptance": 1.0},
                "draft": {"drafted": d[0], "accepted": d[1], "acceptance": None}}

    results = [
        _run("ar", "ar", "a", 20, 0), _run("ar", "ar", "b", 30, 0),
        _run("sd K=1 L=8", "sd", "a", 20, 6, per((6, 6), (10, 5))),
        _run("sd K=1 L=8", "sd", "b", 30, 9, per((9, 9), (20, 15))),
        _run("llama.cpp n_max=16", PEER, "a", 24, None, constraint="json_schema", drafted=12, accepted=9),
        _run("plain", "sd", "a", 20, None),  # not constrained: no row
    ]
    labels = ["ar", "sd K=1 L=8", "llama.cpp n_max=16", "plain"]
    md, out = constrained(results, labels)
    assert list(out) == labels[:3]
    assert out["ar"] == {"prompts": 2, "tokens": 50, "forced_share": 0.0, "proposers": {}}
    sd = out["sd K=1 L=8"]
    assert sd["forced_share"] == pytest.approx(15 / 50)
    assert sd["proposers"] == {"grammar": {"drafted": 15, "accepted": 15, "acceptance": 1.0},
                               "draft": {"drafted": 30, "accepted": 20, "acceptance": pytest.approx(2 / 3)}}
    assert out["llama.cpp n_max=16"]["forced_share"] is None  # the peer does not say
    assert out["llama.cpp n_max=16"]["proposers"] == {"draft": {"drafted": 12, "accepted": 9, "acceptance": 0.75}}
    assert "| sd K=1 L=8 | 2 | 0.30 | grammar 1.00 (15/15), draft 0.67 (20/30) |" in md
    assert "| ar | 2 | 0.00 | — |" in md and "| llama.cpp n_max=16 | 1 | — | draft 0.75 (9/12) |" in md
    assert constrained(results[-1:], ["plain"]) == ("", {})
    # older result files kept (drafted, accepted) pairs: still read
    old = Run("d", "a", "sd", 1, 8, 0.0, 1.0, extra={"proposers": {"grammar": [3, 3], "draft": [0, 0]}})
    assert pooled_proposers([old]) == {"grammar": {"drafted": 3, "accepted": 3, "acceptance": 1.0}}


def test_an_empty_selection_is_one_line() -> None:
    from localspec.bench.speed import main

    a = argparse.Namespace(target="t", draft="d", prompts=None, kinds=["math"], half="report", limit=None,
                           quick=False)
    with pytest.raises(LocalspecError, match="no prompts match --kinds math --half report"):
        main(a)


# --------------------------------------------------------------------------- end to end


def test_structured_bench_on_smollm2(tmp_path: Path, smollm2_path: Path, smollm2_q4_0_path: Path) -> None:
    """2 structured prompts x 24 tokens, AR and sd: every answer is JSON valid under its
    schema, every column ran under it and reports its forced share."""
    from localspec.cli.main import main

    out = tmp_path / "speed.json"
    rc = main(["bench", "speed", "-m", "smollm2-135m", "-md", "smollm2-135m-q4_0", "--kinds", "structured",
               "--limit", "2", "-n", "24", "--methods", "sd", "--grid", "1:8", "--no-peer", "-t", "1",
               "--out", str(out)])  # fmt: skip
    assert rc == 0
    data = json.loads(out.read_text())
    schemas = {p.id: p.schema for p in load_prompts(None, ["structured"], 2)}
    runs = data["runs"]
    assert {(r["label"], r["prompt_id"].rpartition("#")[0]) for r in runs} == \
        {(lab, pid) for lab in ("ar", "sd K=1 L=8") for pid in schemas}
    for r in runs:
        assert r["extra"]["constraint"] == "json_schema" and r["extra"]["forced"] >= 0
        answer = json.loads(r["text"])  # every answer is JSON ...
        assert isinstance(answer, dict)
        schema = schemas[r["prompt_id"].rpartition("#")[0]]
        assert set(answer) == set(schema["required"])  # ... with exactly the schema's keys
        jsonschema = pytest.importorskip("jsonschema")
        jsonschema.validate(answer, schema)
    assert data["greedy_identical"] == {pid: True for pid in schemas}
    for lab in ("ar", "sd K=1 L=8"):
        s = data["summary"][lab]
        assert 0.0 <= s["forced_share"] <= 1.0 and isinstance(s["proposers"], dict)
        assert data["constrained"][lab]["prompts"] == 2
    assert data["summary"]["ar"]["forced_share"] == 0.0  # AR drafts nothing, forced or not
    assert data["constrained"]["sd K=1 L=8"]["proposers"]["draft"]["drafted"] > 0
