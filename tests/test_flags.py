"""localspec.flags: the flags run / chat / serve share, read back into settings (no model).

The constrained-output flags (llama.cpp's names): each builds its ConstraintSpec in
GenConfig.constraint, through every command that generates, and carries it through
`resolve`; none of them leaves it None. The bad inputs (one line, exit 2, before any model
loads) are in test_cli_badinput.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from localspec.cli.main import build_parser
from localspec.constrain.spec import ConstraintSpec
from localspec.errors import ConfigError
from localspec.flags.args import asked_of
from localspec.flags.constrain import constraint_of
from localspec.settings import resolve

GBNF = 'root ::= ("yes" | "no")'
SCHEMA = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})


def _cfg(*argv: str, command: str = "run"):
    head = {"run": ["run", "-m", "x.gguf", "-p", "hi"], "chat": ["chat", "--plain", "-m", "x.gguf"],
            "serve": ["serve", "-m", "x.gguf"]}[command]
    return asked_of(build_parser().parse_args([*head, *argv])).cfg


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "yesno.gbnf").write_text(GBNF + "\n")
    (tmp_path / "person.json").write_bytes(b"\xef\xbb\xbf" + SCHEMA.encode())  # a BOM is dropped
    return {"gbnf": str(tmp_path / "yesno.gbnf"), "schema": str(tmp_path / "person.json")}


@pytest.mark.parametrize("command", ["run", "chat", "serve"])
def test_each_flag_builds_its_constraint_spec(command: str, files: dict[str, str]) -> None:
    want = {
        ("--grammar", GBNF): ConstraintSpec("gbnf", GBNF, origin="--grammar"),
        ("--grammar-file", files["gbnf"]): ConstraintSpec("gbnf", GBNF + "\n", origin=f"--grammar-file {files['gbnf']}"),
        ("-j", SCHEMA): ConstraintSpec("json_schema", SCHEMA, origin="-j/--json-schema"),
        ("--json-schema", SCHEMA): ConstraintSpec("json_schema", SCHEMA, origin="-j/--json-schema"),
        ("--json-schema-file", files["schema"]):
            ConstraintSpec("json_schema", SCHEMA, origin=f"--json-schema-file {files['schema']}"),
    }
    for argv, spec in want.items():
        got = _cfg(*argv, command=command).constraint
        assert got == spec, (argv, got)
        assert got.grammar()  # compiles (it was compiled once already, to check it)
    assert _cfg(command=command).constraint is None


def test_the_constraint_survives_resolve() -> None:
    class Card:
        sampling_metadata: dict = {}
        think_markers = None

        def render(self, messages, **kw):
            return "".join(m["content"] for m in messages)

    asked = asked_of(build_parser().parse_args(["run", "-m", "x.gguf", "-p", "hi", "-j", "{}"]))
    assert resolve(asked, Card(), "x.gguf").cfg.constraint == ConstraintSpec("json_schema", "{}", origin="-j/--json-schema")


def test_a_namespace_with_two_sources_is_refused_without_argparse() -> None:
    """argparse's mutually exclusive group refuses two on the command line; constraint_of
    refuses them too for a Namespace built another way, and ignores commands without the flags."""
    with pytest.raises(ConfigError, match="--grammar and -j/--json-schema: give at most one"):
        constraint_of(argparse.Namespace(grammar=GBNF, json_schema="{}"))
    assert constraint_of(argparse.Namespace()) is None


def test_llama_cpp_s_sample_grammars_compile_through_grammar_file(tmp_path: Path) -> None:
    """The help says llama.cpp's grammars/*.gbnf work as they are: the copies that
    llama-cpp-python ships (json, json_arr, list, arithmetic, c, chess, japanese)."""
    from llama_cpp import llama_grammar

    names = [n for n in dir(llama_grammar) if n.endswith("_GBNF")]
    assert len(names) >= 5, names
    for n in names:
        f = tmp_path / f"{n.lower()}.gbnf"
        f.write_text(getattr(llama_grammar, n))
        spec = constraint_of(argparse.Namespace(grammar_file=str(f)))
        assert spec is not None and spec.kind == "gbnf", n


def test_help_teaches_the_constraint_flags() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for s in ("--grammar GBNF", "--grammar-file PATH", "-j SCHEMA, --json-schema SCHEMA", "--json-schema-file PATH",
              "lossless", "forced", "at most one"):
        assert s in text, s


def test_serve_s_flag_is_every_request_s_default_and_a_request_s_own_replaces_it() -> None:
    """As llama-server's --grammar / -j: the server's constraint holds for a request that
    sends none; a request's response_format / grammar / json_schema replaces it."""
    from localspec.server.schema import Limits, parse_chat

    cfg = _cfg("--grammar", GBNF, command="serve")
    limits = Limits(cfg=cfg, n_ctx=2048)
    msgs = [{"role": "user", "content": "hi"}]
    assert parse_chat({"messages": msgs}, limits).cfg.constraint == cfg.constraint
    own = parse_chat({"messages": msgs, "response_format": {"type": "json_object"}}, limits).cfg.constraint
    assert own is not None and own.kind == "json_object"
    assert parse_chat({"messages": msgs}, Limits(cfg=_cfg(command="serve"), n_ctx=2048)).cfg.constraint is None
