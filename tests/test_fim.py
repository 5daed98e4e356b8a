"""Fill-in-the-middle without a model: the prompt llama-server's format_prompt_infill makes
(order, repository context, the budget when the context is short), the line rules that end
a completion (n_indent, max_lines, t_max_predict_ms), and the /infill request policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from localspec.backend.fim import NULL, FimTokens, FimUnsupportedError, build_infill, fim_budget
from localspec.cli.main import main
from localspec.config import GenConfig
from localspec.decode.lines import LineRules
from localspec.server.errors import ApiError
from localspec.server.infill import nested_values, parse_infill, supersede_key
from localspec.server.schema import Limits, parse_completion
from localspec.session import FimInput

# a FIM vocabulary with repository tokens (Qwen2.5-Coder's shape) and one without
QWEN = FimTokens(pre=1001, suf=1002, mid=1003, pad=1004, rep=1005, sep=1006)
PLAIN = FimTokens(pre=1001, suf=1002, mid=1003)


def chars(text: str) -> list[int]:
    """A tokenizer with one token per character (ids = code points): counts are lengths."""
    return [ord(c) for c in text]


def text(ids: list[int]) -> str:
    names = {1001: "<PRE>", 1002: "<SUF>", 1003: "<MID>", 1005: "<REP>", 1006: "<SEP>", 7: "<BOS>"}
    return "".join(names.get(i, chr(i) if i < 1000 else "?") for i in ids)


def build(fim: FimTokens = QWEN, inp: FimInput | None = None, **kw) -> str:
    kw = {"n_batch": 512, "n_predict": 64, "n_ctx": 4096, **kw}
    return text(build_infill(fim, chars, inp or FimInput("def f(x):\n    ", "\n    return y\n"), **kw))


def test_prompt_order_is_llama_servers() -> None:
    extra = ({"filename": "a.py", "text": "A = 1\n"}, {"filename": "b.py", "text": "B = 2\n"})
    got = build(inp=FimInput("pre", "suf", extra, prompt="pr"))
    assert got == "<REP>myproject\n<SEP>a.py\nA = 1\n<SEP>b.py\nB = 2\n<SEP>filename\n<PRE>prepr<SUF>suf<MID>"


def test_without_repository_tokens_chunks_get_the_snippet_separator() -> None:
    got = build(PLAIN, FimInput("p", "s", ({"filename": "x.py", "text": "X"},)))
    assert got == "\n\n--- snippet ---\n\nX<PRE>p<SUF>s<MID>"


def test_bos_goes_after_the_extra_context_and_spm_swaps_the_halves() -> None:
    inp = FimInput("p", "s", ({"text": "E"},))
    assert build(PLAIN, inp, bos=7) == "\n\n--- snippet ---\n\nE<BOS><PRE>p<SUF>s<MID>"
    assert build(PLAIN, FimInput("p", "s"), spm=True) == "<SUF>s<PRE>p<MID>"


def test_budget_keeps_the_prefix_end_and_the_suffix_start() -> None:
    """n_batch 64: the prefix keeps its last 48 tokens, the suffix its first 64/4 - 2 - len(prompt)."""
    inp = FimInput("a" * 100 + "END", "START" + "z" * 100, prompt="xy")
    got = build(PLAIN, inp, n_batch=64)
    pre, rest = got.split("<SUF>")
    assert pre == "<PRE>" + ("a" * 100 + "END")[-48:] + "xy"
    assert rest == ("START" + "z" * 100)[: 16 - 2 - 2] + "<MID>"


def test_budget_extra_keeps_the_most_recent_tokens() -> None:
    """Extra context fills n_ctx - n_batch - 2 n_predict at most, cut from the front."""
    inp = FimInput("p", "s", ({"filename": "f", "text": "x" * 500 + "LAST"},))
    got = build(inp=inp, n_ctx=512 + 2 * 64 + 20, n_batch=512, n_predict=64)
    head = got.split("<PRE>")[0]
    assert head == "xxxxxxLAST<SEP>filename\n"  # 20 tokens: <SEP> is one
    assert build(inp=inp, n_ctx=512 + 128, n_batch=512, n_predict=64).startswith("<PRE>")  # no room: none


def test_fim_budget_is_llama_servers_default_batch_where_the_context_holds_it() -> None:
    """llama-server budgets with its -b (2048 by default), not localspec's decode batch."""
    assert fim_budget(512, 4096) == 2048
    assert fim_budget(512, 2048) == 1024  # a short context: half of it
    assert fim_budget(4096, 16384) == 4096  # a larger --batch widens it
    assert fim_budget(512, 512) == 512


def test_a_typed_character_keeps_the_prompt_up_to_the_cursor() -> None:
    """An editor's follow-up request (one more character before the cursor) shares every
    token up to the cursor with the one before, so only the typed character and what
    follows the cursor are evaluated again; a prefix cut to a sliding window (the 512 budget
    kept 384 tokens) would change from its first token."""
    before, after = "x = 1\n" * 150, "\nreturn y\n"  # a 1,050-token prefix
    n = fim_budget(512, 4096)
    one = build(PLAIN, FimInput(before, after), n_batch=n)
    two = build(PLAIN, FimInput(before + "z", after), n_batch=n)
    cursor = len("<PRE>" + before)
    assert one[:cursor] == two[:cursor] == "<PRE>" + before
    slid = build(PLAIN, FimInput(before + "z", after), n_batch=512)
    assert not slid.startswith(one[:cursor])


def test_a_model_without_fim_tokens_is_refused_by_name() -> None:
    with pytest.raises(FimUnsupportedError, match="fim_pre, fim_suf, fim_mid"):
        FimTokens().require("smollm2")
    assert FimTokens(pre=1, suf=2, mid=NULL).missing == ["mid"]
    QWEN.require("qwen")  # no error


# ---------------------------------------------------------------------------- line rules
def feed_all(rules: LineRules, pieces: list[str]) -> tuple[str, bool]:
    out = []
    for p in pieces:
        kept, ended = rules.feed(p)
        out.append(kept)
        if ended:
            return "".join(out), True
    return "".join(out), False


def test_n_indent_cuts_the_first_line_indented_less() -> None:
    """llama-server: the first line is free (it continues the cursor's); a later one indented
    by fewer than n_indent ends the answer, its text cut and its indentation kept."""
    got = feed_all(LineRules(n_indent=4), ["x = 1", "\n    y", " = 2\n", "  ", "def g", "():\n"])
    assert got == ("x = 1\n    y = 2\n  ", True)
    assert feed_all(LineRules(n_indent=4), ["a\n    b\n        c\n"]) == ("a\n    b\n        c\n", False)


def test_n_indent_a_blank_line_ends_the_block() -> None:
    assert feed_all(LineRules(n_indent=4), ["    a = 1\n", "\n", "    b"]) == ("    a = 1\n", True)


def test_n_indent_counts_tabs_and_off_means_off() -> None:
    assert feed_all(LineRules(n_indent=1), ["a\n\tb\nc"]) == ("a\n\tb\n", True)
    assert not LineRules().active
    assert feed_all(LineRules(), ["a\nb\n\nc"]) == ("a\nb\n\nc", False)


def test_max_lines_drops_the_last_newline() -> None:
    assert feed_all(LineRules(max_lines=2), ["one\ntw", "o\nthree"]) == ("one\ntwo", True)
    assert feed_all(LineRules(max_lines=1), ["one"]) == ("one", False)


def test_time_limit_stops_only_at_a_new_line() -> None:
    now = [0.0]
    rules = LineRules(t_max_predict_ms=100, clock=lambda: now[0])
    now[0] = 0.5  # past the limit, but no newline yet: go on
    assert rules.feed("abc") == ("abc", False)
    assert rules.feed("d\ne") == ("d\ne", True)  # llama-server keeps the whole piece
    early = LineRules(t_max_predict_ms=100, clock=lambda: 0.0)
    assert early.feed("a\nb\n") == ("a\nb\n", False)


# ---------------------------------------------------------------------------- request policy
LIMITS = Limits(cfg=GenConfig(method="ar", n_predict=32), n_ctx=2048)


def test_infill_fields_reach_the_config() -> None:
    req = parse_infill({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "t"}],
                        "prompt": "p", "n_predict": 9, "n_indent": 4, "t_max_predict_ms": 250,
                        "max_lines": 3, "stream": True, "cache_prompt": True, "id_slot": 2,
                        "samplers": ["top_k", "infill"], "temperature": 0}, LIMITS)
    assert req.kind == "infill" and req.stream
    assert req.fim == FimInput("a", "b", ({"filename": "tmp", "text": "t"},), "p")
    assert (req.cfg.n_predict, req.cfg.n_indent, req.cfg.t_max_predict_ms, req.cfg.max_lines) == (9, 4, 250, 3)
    assert req.ignored == ["samplers"]  # accepted for llama.vscode, said not applied
    assert supersede_key(req, "127.0.0.1") == "slot 2"
    no_slot = parse_infill({"input_prefix": "a", "input_suffix": "b"}, LIMITS)
    assert supersede_key(no_slot, "10.0.0.5") == "host 10.0.0.5"


@pytest.mark.parametrize(("body", "param"), [
    ({"input_suffix": "b"}, "input_prefix"),
    ({"input_prefix": "a"}, "input_suffix"),
    ({"input_prefix": 1, "input_suffix": "b"}, "input_prefix"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": "x"}, "input_extra"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "f"}]}, "input_extra[0]"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "t", "filename": 3}]},
     "input_extra[0].filename"),
    ({"input_prefix": "a", "input_suffix": "b", "n_indent": -1}, "n_indent"),
    ({"input_prefix": "a", "input_suffix": "b", "response_fields": "content"}, "response_fields"),
    ({"input_prefix": "a", "input_suffix": "b", "mirostat": 2}, "mirostat"),
])
def test_bad_infill_bodies_name_the_field(body: dict, param: str) -> None:
    with pytest.raises(ApiError) as e:
        parse_infill(body, LIMITS)
    assert e.value.status == 400 and e.value.param == param


def test_a_model_without_fim_tokens_is_a_400_on_both_routes() -> None:
    plain = Limits(cfg=GenConfig(), n_ctx=2048, fim_missing=("pre", "suf", "mid"))
    with pytest.raises(ApiError, match="Infill is not supported") as e:
        parse_infill({"input_prefix": "a", "input_suffix": "b"}, plain)
    assert e.value.status == 400
    with pytest.raises(ApiError, match="fim_pre") as e:
        parse_completion({"prompt": "a", "suffix": "b"}, plain)
    assert e.value.param == "suffix"
    assert parse_completion({"prompt": "a", "suffix": ""}, plain).fim is None  # OpenAI's default


def test_completions_suffix_is_fill_in_the_middle() -> None:
    req = parse_completion({"prompt": "def f():\n    ", "suffix": "\n", "max_tokens": 8}, LIMITS)
    assert req.fim == FimInput("def f():\n    ", "\n")
    with pytest.raises(ApiError) as e:
        parse_completion({"prompt": [1, 2], "suffix": "x"}, LIMITS)
    assert e.value.param == "suffix"


def test_response_fields_pick_nested_values() -> None:
    body = {"content": "x", "timings": {"predicted_n": 3}, "stop": True}
    assert nested_values(["content", "timings/predicted_n", "nope", "content/x"], body) == {
        "content": "x", "timings/predicted_n": 3}


# ---------------------------------------------------------------------------- the CLI
def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localspec.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize(("args", "says"), [
    (["--fim-suffix-file", "x.py"], "need --fim-prefix-file"),
    (["--fim-prefix-file", "NOPE.py"], "cannot read NOPE.py"),
    (["--fim-prefix-file", "PRE", "-p", "hi"], "takes the place of -p/-f"),
    (["--fim-prefix-file", "PRE", "--n-indent", "-1"], "--n-indent must be >= 0"),
    (["--fim-prefix-file", "BAD"], "not UTF-8"),
])
def test_run_fim_flags_refused_before_a_model_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   args: list[str], says: str) -> None:
    (tmp_path / "PRE").write_text("def f():\n    ")
    (tmp_path / "BAD").write_bytes(b"x = '\xff'\n")
    args = [str(tmp_path / a) if a in ("PRE", "BAD") else a for a in args]
    assert main(["run", "-m", "no-such-model.gguf", *args]) == 2  # the model would not resolve
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_run_fim_on_a_model_without_fim_tokens_is_exit_2(smollm2_path: Path, tmp_path: Path) -> None:
    (tmp_path / "pre.py").write_text("def f():\n    ")
    r = cli("run", "-m", str(smollm2_path), "--method", "ar", "-t", "1", "-n", "4",
            "--fim-prefix-file", str(tmp_path / "pre.py"))
    assert r.returncode == 2, r.stderr
    assert "no fill-in-the-middle tokens" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_run_fim_json_says_which_drafter_wrote_each_span(qwen_draft_path: Path, tmp_path: Path) -> None:
    """The suffix holds the hole's lines: prompt lookup drafts them; --json's spans say so."""
    (tmp_path / "pre.py").write_text("values = [\n    'alpha',\n    'beta',\n")
    (tmp_path / "suf.py").write_text("]\n\nsame = [\n    'alpha',\n    'beta',\n    'gamma',\n    'delta',\n]\n")
    r = cli("run", "-m", str(qwen_draft_path), "--method", "sd", "--spec-type", "ngram", "-L", "8", "--temp", "0",
            "-t", "2", "-n", "12", "--fim-prefix-file", str(tmp_path / "pre.py"),
            "--fim-suffix-file", str(tmp_path / "suf.py"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "".join(s["text"] for s in out["spans"]) == out["text"]
    assert sum(s["tokens"] for s in out["spans"] if s["by"] == "ngram") >= 4, out["spans"]


def test_a_stoppable_prompt_is_evaluated_in_small_chunks(smollm2_path) -> None:
    """A prompt whose evaluation a newer request may stop goes in STOP_CHUNK-token decodes
    (a 512-token batch is ~5 s of a 2-core CPU the next request would wait for); one that
    nothing can stop in whole batches. Stopped after its first decode: exactly one chunk kept."""
    from localspec.backend import Context, Model
    from localspec.decode.state import STOP_CHUNK, KVState
    from localspec.stopflag import StopFlag

    ctx = Context(Model(smollm2_path), n_ctx=2048, n_batch=512, n_seq_max=2)
    sizes: list[int] = []
    stop = StopFlag()
    ctx.after_decode = lambda b: (sizes.append(b.n), stop.set())
    kv = KVState(ctx)
    prompt = [(i * 37) % 1000 + 10 for i in range(700)]
    assert kv.sync(prompt, stop) == STOP_CHUNK and sizes == [STOP_CHUNK] and kv.pending == []
    assert kv.tokens == prompt[:STOP_CHUNK]  # the evaluated part stays cached for the next request
    ctx.after_decode = lambda b: sizes.append(b.n)
    sizes.clear()
    stop.clear()
    assert kv.sync(prompt, stop) == len(prompt) - 1 - STOP_CHUNK and set(sizes[:-1]) == {STOP_CHUNK}
    kv.sync([1])
    sizes.clear()
    assert kv.sync(prompt) == len(prompt) - 1 and sizes == [512, len(prompt) - 1 - 512]
    ctx.close()
