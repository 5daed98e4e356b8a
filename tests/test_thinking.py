"""Thinking models: markers, the reasoning split, per-segment stats, the budget, the history
rule, the server's reasoning_content, `run --json`, sampling defaults, the vocab check.

Real generation runs on tiny random-weight GGUFs of llama.cpp's qwen3 architecture
(tests/support/tiny_gguf: Qwen2.5's tokenizer + Qwen3's <think> tokens, written once per
session): "target" has Qwen3's template, "r1" a DeepSeek-R1-style one whose generation
prompt opens the block (so a random model "thinks" from its first token), "draft" is the
target's weights with 10 % noise (it agrees part of the time), "pad128"/"pad129" have 128 /
129 fewer (padding) tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.errors import ConfigError, VocabMismatchError
from localspec.events import Accepted, Done, Stats, StatsUpdate, Written
from localspec.sampling_defaults import LLAMA_CPP_DEFAULTS, registry_sets, resolve_sampling
from localspec.session import ThinkMarkers
from localspec.thinking.budget import ForcedWritten, think
from localspec.thinking.split import (
    ReasoningSplitter,
    answer_only,
    has_thinking_switch,
    split_text,
    strip_reasoning,
    thinking_kwargs,
)
from tests.support import tiny_gguf as tg
from tests.support.helpers import model, session

HI = [{"role": "user", "content": "hello"}]
M = ThinkMarkers("<think>", "</think>", (1,), (2,))  # scripted-event tests: ids 1 and 2 are the markers


@dataclass(frozen=True)
class Files:
    target: Path
    draft: Path
    r1: Path
    pad128: Path
    pad129: Path


@pytest.fixture(scope="session")
def files(tmp_path_factory) -> Files:
    from localspec.models import resolve_model

    d = tmp_path_factory.mktemp("tiny_qwen3")
    tok = tg.read_qwen25_tokenizer(resolve_model("qwen2.5-coder-0.5b"))  # its vocabulary (fetched once)
    n = len(tok.tokens)
    return Files(
        target=tg.write_tiny(d / "target.gguf", "qwen3", tok, seed=0),
        draft=tg.write_tiny(d / "draft.gguf", "qwen3", tok, seed=0, noise=0.1),
        r1=tg.write_tiny(d / "r1.gguf", "qwen3", tok, seed=0, template=tg.OPEN_THINK_TEMPLATE,
                         sampling={"temp": 0.6, "top_k": 20}),
        pad128=tg.write_tiny(d / "pad128.gguf", "qwen3", tok, seed=2, n_vocab=n - 128),
        pad129=tg.write_tiny(d / "pad129.gguf", "qwen3", tok, seed=2, n_vocab=n - 129),
    )


def last(events) -> Done:
    out = None
    for ev in events:
        out = ev
    assert isinstance(out, Done)
    return out


def common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# ------------------------------------------------------------------ the tiny model
def test_tiny_qwen3_loads_renders_and_has_markers(files):
    s = session(files.target, files.draft)
    m = s.think_markers
    assert m == ThinkMarkers("<think>", "</think>", (151667,), (151668,), "vocab")
    on = s.render(HI, template_kwargs={"enable_thinking": True})
    off = s.render(HI, template_kwargs={"enable_thinking": False})
    assert on.endswith("<|im_start|>assistant\n") and off == on + "<think>\n\n</think>\n\n"
    assert has_thinking_switch(s)
    assert thinking_kwargs(s, "off") == {"enable_thinking": False}
    assert thinking_kwargs(s, "on") == {"enable_thinking": True} and thinking_kwargs(s, "auto") == {}
    assert not has_thinking_switch(session(files.r1))  # a template without the switch
    assert session(files.r1).sampling_metadata == {"general.sampling.temp": "0.600000", "general.sampling.top_k": "20"}
    assert s.sampling_metadata == {}


METHODS = [("ar", 1), ("sd", 1), ("gbv", 1), ("mdbv", 2), ("spectr", 2), ("spectr-gbv", 2), ("parse", 1), ("auto", 1)]


def test_generates_with_every_method(files, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))  # auto's cost curves: not in the user's cache
    s = session(files.target, files.draft)
    texts = {}
    for method, K in METHODS:
        d = last(s.generate(HI, GenConfig(method=method, K=K, L=4, n_predict=16, seed=1)))
        assert d.reason == "max_tokens" and d.stats.n_tokens == 16, method
        texts[method] = d.text
    lossless = {texts[m] for m, _ in METHODS if m != "parse"}
    assert len(lossless) == 1 and len(texts["ar"]) > 16  # greedy: every lossless method writes AR's text
    sampled = last(s.generate(HI, GenConfig(method="mdbv", K=2, L=4, n_predict=16, seed=3,
                                            sampling=SamplingConfig(temp=0.8))))
    assert sampled.stats.n_tokens == 16 and sampled.text != texts["ar"]


# ------------------------------------------------------------------ splitter
def feed_all(sp: ReasoningSplitter, events) -> list:
    pieces = []
    for ev in events:
        pieces += sp.feed(ev)
    return pieces + sp.finish()


def w(text: str, tokens: tuple[int, ...] = ()) -> Written:
    return Written(tokens, text, "target")


@pytest.mark.parametrize("chunks, inside, closed, want", [
    (["<th", "ink>\nab", "c d\n</", "think>\n\nAns", "wer"], False, False, ("abc d", "Answer")),
    (["abc\n</think>", "\n\nX"], True, False, ("abc", "X")),  # the prompt opened the block
    (["  hello <think>", "x</think>"], False, False, ("", "  hello <think>x</think>")),  # no block at the start
    (["\n<think>\n\n</think>\n\n", "Hi"], False, False, ("", "Hi")),  # an empty block (Qwen3 /no_think)
    (["<think>\nstill thinking  ", "\n"], False, False, ("still thinking", "")),  # never closed
    (["<think>abc</thi"], False, False, ("abc</thi", "")),  # a partial marker at the end is text
    (["\n\nAnswer"], False, True, ("", "Answer")),  # enable_thinking=false: the block is in the prompt
    (["\n", "  "], False, False, ("", "\n  ")),  # whitespace only: verbatim answer
])
def test_splitter_cases(chunks, inside, closed, want):
    sp = ReasoningSplitter(M, inside, closed)
    pieces = feed_all(sp, [w(c) for c in chunks])
    assert (sp.reasoning, sp.answer) == want
    assert "".join(p.text for p in pieces if p.segment == "reasoning") == want[0]
    assert "".join(p.text for p in pieces if p.segment == "answer") == want[1]
    assert split_text("".join(chunks), M, inside=inside) == want or closed
    text = "".join(chunks)  # every piece is the run of the visible text its start says
    assert all(text[p.start : p.start + len(p.text)] == p.text for p in pieces)
    if not closed:  # the TUI (which leaves closed to the model) shows the splitter's split
        assert tui_regions(chunks, inside) == want


class MarkerSession:
    """Just what the TUI's thinking layer asks of a session: markers, and a rendered prompt
    that opens the block (DeepSeek-R1 style) when `inside`."""

    think_markers = M

    def __init__(self, inside: bool) -> None:
        self.inside = inside

    def render(self, messages, *, template_kwargs=None) -> str:
        return "prompt" + ("<think>\n" if self.inside else "")


def tui_regions(chunks: list[str], inside: bool) -> tuple[str, str]:
    """(dimmed, plain) text of the TUI's unfolded rendering of a turn written in `chunks`:
    what the TUI shows as reasoning and as the answer."""
    from localspec.tui.thinking import ThinkingBlocks
    from localspec.tui.transcript import Transcript, render_spans

    fake, blocks, tr = MarkerSession(inside), ThinkingBlocks(folded=False), Transcript()
    turn = tr.begin_turn("q")
    for ev in [*(w(c) for c in chunks), Done("eog", "".join(chunks), Stats())]:
        tr.apply(ev)
        blocks.feed(0, ev, fake)
    out = blocks.render(0, turn, fake, render_spans(turn.spans))
    parts, styled = {True: "", False: ""}, set()
    for span in out.spans:
        parts["dim" in str(span.style).split()] += out.plain[span.start : span.end]
        styled |= set(range(span.start, span.end))
    unstyled = "".join(c for i, c in enumerate(out.plain) if i not in styled)
    assert unstyled in ("", "\n")  # the line the TUI puts where the close marker was, nothing else
    return parts[True], parts[False]


def test_splitter_without_markers_and_history_strip():
    sp = ReasoningSplitter(None)
    assert [p.text for p in feed_all(sp, [w("<think>x</think>y")])] == ["<think>x</think>y"]
    assert strip_reasoning("<think>\nR\n</think>\n\nA", M) == "A" and strip_reasoning("<think>R", M) == ""
    msgs = [{"role": "user", "content": "<think>u</think>"},
            {"role": "assistant", "content": "<think>R</think>\n\nA", "reasoning_content": "R"}]
    assert answer_only(msgs, M) == [msgs[0], {"role": "assistant", "content": "A"}]


def test_tokens_and_segment_stats_from_scripted_events():
    def st(iters: int, n: int, calls: int, acc: list[int], drafted: int, secs: float) -> StatsUpdate:
        return StatsUpdate(Stats(method="sd", n_tokens=n, iterations=iters, target_calls=calls,
                                 accepted_lengths=acc, drafted=drafted, seconds=secs))

    events = [
        Written((1,), "<think>", "target"), st(1, 1, 1, [], 0, 0.1),
        Accepted(0, 3, (10, 11, 12), "a b c"), Written((13,), " d", "bonus"), st(2, 5, 2, [3], 3, 0.3),
        Accepted(0, 1, (14,), " e"), Written((2,), "</think>", "correction"), st(3, 7, 3, [3, 1], 6, 0.4),
        Accepted(0, 3, (15, 16, 17), "\n\nX Y"), Written((18,), " Z", "bonus"), st(4, 11, 4, [3, 1, 3], 9, 0.6),
    ]
    sp = ReasoningSplitter(M)
    pieces = feed_all(sp, events)
    assert (sp.reasoning, sp.answer) == ("a b c d e", "X Y Z")
    r, a = sp.stats["reasoning"], sp.stats["answer"]
    assert (r.tokens, a.tokens, sp.inner_tokens) == (7, 4, 5)  # markers in the block, not inside it
    assert sum(p.tokens for p in pieces) == 11
    assert (r.iterations, r.target_calls, r.accepted, r.drafted) == (3, 3, 4, 6)
    assert (a.iterations, a.target_calls, a.accepted, a.drafted) == (1, 1, 3, 3)
    assert r.block_efficiency == pytest.approx(7 / 3) and a.block_efficiency == 4.0
    assert r.seconds == pytest.approx(0.4) and a.seconds == pytest.approx(0.2)
    assert r.acceptance == pytest.approx(4 / 6)


def test_real_segments_add_up(files):
    s = session(files.r1, files.draft)
    run = think(s, HI, GenConfig(method="sd", L=4, n_predict=40, seed=1), budget=20)
    d = last(run)
    r, a = run.splitter.stats["reasoning"], run.splitter.stats["answer"]
    assert r.tokens == 20 and r.tokens + a.tokens == d.stats.n_tokens == 40
    assert r.iterations + a.iterations == d.stats.iterations
    assert r.target_calls + a.target_calls == d.stats.target_calls
    assert r.accepted + a.accepted == sum(d.stats.accepted_lengths) > 0  # the noisy draft agrees sometimes


# ------------------------------------------------------------------ budget
@pytest.mark.parametrize("method", ["ar", "sd"])
def test_budget_forces_the_close_and_reuses_the_kv_prefix(files, method):
    s = session(files.r1, files.draft)
    cfg = GenConfig(method=method, L=4, n_predict=30)
    run = think(s, HI, cfg, budget=8)
    events = list(run)
    d = events[-1]
    forced = [e for e in events if isinstance(e, ForcedWritten)]
    assert len(forced) == 1 and forced[0].text == run.forced == "\n</think>\n\n" and len(forced[0].tokens) == 3
    assert sum(isinstance(e, Done) for e in events) == 1
    assert run.splitter.inner_tokens == 8 and d.text.count("</think>") == 1
    assert d.text == "".join(e.text for e in events if isinstance(e, Accepted | Written))
    p1, p2 = run.phases
    assert (p1.n_tokens, p2.n_tokens, d.stats.n_tokens) == (8, 22, 30)
    assert p2.prompt_tokens == p1.prompt_tokens + 8 + 3
    assert p2.prompt_evaluated <= 3  # the forced tokens (+ the pending one): the prefix came from the KV
    reasoning, answer = run.splitter.reasoning, run.splitter.answer
    assert reasoning and answer and "<think>" not in answer
    # the continuation is exact: a fresh session given the same prefix writes the same answer
    fresh = session(files.r1)
    prefix = d.text[: d.text.index("</think>") + len("</think>\n\n")]
    cont = last(fresh.generate(HI, GenConfig(method="ar", n_predict=22), prefill=prefix))
    assert prefix + cont.text == d.text


def test_budget_unforced_split_is_exact_and_zero_budget(files):
    s = session(files.target, files.draft)  # Qwen3 template: the random model never opens a block
    cfg = GenConfig(method="sd", L=4, n_predict=20)
    whole = last(s.generate(HI, cfg))
    run = think(s, HI, cfg, budget=5)
    d = last(run)
    assert len(run.phases) == 2 and not run.forced and d.text == whole.text  # cut at 6 tokens, continued exactly
    r0 = think(session(files.r1), HI, GenConfig(method="ar", n_predict=6), budget=0)
    first = next(iter(r0))
    assert isinstance(first, ForcedWritten) and first.text == "</think>\n\n"
    d0 = last(r0)
    assert d0.stats.n_tokens == 6 and r0.splitter.stats["reasoning"].tokens == 0
    assert r0.splitter.reasoning == "" and r0.splitter.answer


# ------------------------------------------------------------------ history rule + KV
def test_history_rule_re_evaluates_from_the_first_changed_token(files):
    s = session(files.r1)
    cfg = GenConfig(method="ar", n_predict=12)
    d1 = last(s.chat("first question", cfg, reasoning_budget=4))
    assert "</think>" in d1.text and s.messages[-1]["content"] == d1.text  # the conversation keeps it all
    kv = s.last_prompt_tokens + s.last_tokens
    d2 = last(s.chat("second question", cfg))
    history = answer_only(s.messages[:-1], s.think_markers)
    assert history[1]["content"] == strip_reasoning(d1.text, s.think_markers) and "</think>" not in s.render(history)
    new = s.last_prompt_tokens
    keep = common(new[:-1], kv)
    assert keep < len(s.last_prompt_tokens) - 10  # the history changed inside turn 1: re-evaluated from there
    assert d2.stats.prompt_evaluated == len(new) - 1 - keep
    fresh = session(files.r1)
    d3 = last(fresh.generate(history, cfg))
    assert fresh.last_prompt_tokens == new and d3.text == d2.text  # no stale KV served


# ------------------------------------------------------------------ CLI
def test_run_json_splits_reasoning_and_text(files, capsys):
    from localspec.cli.main import main

    args = ["run", "-m", str(files.r1), "--method", "ar", "-n", "16", "--temp", "0", "-t", "1", "-c", "1024",
            "-p", "hello", "--reasoning-budget", "6"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["reasoning"] and out["text"] and out["reasoning_forced"] == "\n</think>\n\n"
    assert "</think>" not in out["text"] + out["reasoning"]
    assert out["segments"]["reasoning"]["tokens"] == 6 and out["n_tokens"] == 16
    assert main(args) == 0  # show: the thinking goes to stderr, the answer to stdout
    cap = capsys.readouterr()
    assert cap.out.strip() == out["text"].strip() and out["reasoning"] in cap.err and "thought for 6 tokens" in cap.err
    assert main([*args, "--reasoning-format", "hide"]) == 0
    cap = capsys.readouterr()
    assert out["reasoning"] not in cap.err and cap.out.strip() == out["text"].strip()
    with pytest.raises(SystemExit) as exc:  # refused while parsing, before any model loads
        main([*args, "--reasoning-budget", "-2"])
    assert exc.value.code == 2 and "--reasoning-budget: must be -1" in capsys.readouterr().err


# ------------------------------------------------------------------ server
def test_server_reasoning_content(files):
    from localspec.server.app import ServerConfig, create_app
    from localspec.server.schema import Limits
    from tests.test_server import ServerThread, sdk_client

    app = create_app(session(files.r1, files.draft),
                     ServerConfig(model_id="tiny", limits=Limits(cfg=GenConfig(method="sd", L=4, n_predict=16), n_ctx=2048)))
    srv = ServerThread(app)
    try:
        c = sdk_client(srv, "x", timeout=60)
        kw = dict(model="tiny", messages=HI, max_tokens=16, temperature=0, extra_body={"reasoning_budget": 5})
        r = c.chat.completions.create(**kw)
        msg = r.choices[0].message
        reasoning = (msg.model_extra or {})["reasoning_content"]
        assert reasoning and msg.content and "</think>" not in msg.content + reasoning
        chunks = list(c.chat.completions.create(**kw, stream=True))
        deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
        assert "".join(d.content or "" for d in deltas) == msg.content
        assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == reasoning
        raw = c.chat.completions.create(**{**kw, "extra_body": {"reasoning_budget_tokens": 5, "reasoning_format": "none"}})
        assert "</think>" in raw.choices[0].message.content  # not split
        # history rule: an assistant turn sent back with its reasoning costs what the answer alone costs
        turn = {"role": "assistant", "content": f"<think>\n{reasoning}\n</think>\n\n{msg.content}",
                "reasoning_content": reasoning}
        plain = {"role": "assistant", "content": msg.content}
        follow = [{"role": "user", "content": "more"}]
        a = c.chat.completions.create(model="tiny", messages=[*HI, turn, *follow], max_tokens=4, temperature=0)
        b = c.chat.completions.create(model="tiny", messages=[*HI, plain, *follow], max_tokens=4, temperature=0)
        assert a.usage.prompt_tokens == b.usage.prompt_tokens and a.choices[0].message.content == b.choices[0].message.content
        bad = httpx.post(srv.url + "/v1/chat/completions", timeout=30,
                         json={"messages": HI, "chat_template_kwargs": {"enable_thinking": "no"}})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "chat_template_kwargs.enable_thinking"
        bad = httpx.post(srv.url + "/v1/chat/completions", timeout=30,
                         json={"messages": HI, "reasoning_budget": 3, "reasoning_budget_tokens": 4})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "reasoning_budget"
    finally:
        srv.stop()


# ------------------------------------------------------------------ sampling defaults
SETS = ("qwen3-x", {"thinking": {"temp": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0},
                    "non_thinking": {"temp": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0},
                    "default": {"min_p": 0.01}})


def test_sampling_precedence_flag_registry_gguf_default():
    none = {"temp": None, "top_k": None, "top_p": None, "min_p": None}
    d = resolve_sampling(none)
    assert (d.sampling.temp, d.sampling.top_k, d.sampling.top_p, d.sampling.min_p) == tuple(LLAMA_CPP_DEFAULTS.values())
    assert set(d.sources.values()) == {"llama.cpp default"}
    g = resolve_sampling(none, gguf={"general.sampling.temp": "0.600000", "general.sampling.top_k": "x"})
    assert g.sampling.temp == pytest.approx(0.6) and g.sources["temp"] == "GGUF general.sampling.temp"
    assert g.sampling.top_k == 40  # unreadable metadata is ignored, as llama.cpp's strtol check does
    gguf = {"general.sampling.temp": "0.3", "general.sampling.min_p": "0.2"}
    t = resolve_sampling({**none, "top_p": 0.5}, registry_entry=SETS, gguf=gguf, thinking=True)
    assert (t.sampling.temp, t.sampling.top_k, t.sampling.top_p, t.sampling.min_p) == (0.6, 20, 0.5, 0.0)
    assert t.sources["top_p"] == "flag --top-p" and t.sources["temp"] == "registry qwen3-x, thinking set"
    n = resolve_sampling({**none, "temp": 0}, registry_entry=SETS, gguf=gguf, thinking=False)
    assert (n.sampling.temp, n.sampling.top_p) == (0.0, 0.8) and n.sources["temp"] == "flag --temp"
    assert "greedy" in n.describe() and "non-thinking set" in n.describe()
    flat = resolve_sampling(none, registry_entry=("m", {"default": {"min_p": 0.01}}), gguf=gguf)
    assert (flat.sampling.min_p, flat.sampling.temp, flat.sampling.top_k) == (0.01, 0.3, 40)
    assert flat.sources == {"temp": "GGUF general.sampling.temp", "top_k": "llama.cpp default",
                            "top_p": "llama.cpp default", "min_p": "registry m"}


def test_registry_sampling_entries(local_registry, tmp_path):
    for name in ("qwen3-32b", "qwen3-8b", "qwen3-1.7b", "qwen3-0.6b"):  # the shipped file (LOCALSPEC_REGISTRY unset)
        got = registry_sets(name)
        assert got is not None and got[1]["thinking"] == {"temp": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0}
        assert got[1]["non_thinking"] == {"temp": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0}
    assert registry_sets("/somewhere/else/Qwen3-8B-Q4_K_M.gguf")[0] == "qwen3-8b"  # a user's own copy
    assert registry_sets("qwen2.5-coder-1.5b") is None
    # the same lookup finds the draft `-md` defaults to under auto (name or the user's own copy)
    from localspec.models.registry import paired_draft

    assert paired_draft("qwen3-32b") == "qwen3-1.7b"
    assert paired_draft("/models/Qwen3-32B-Q4_K_M.gguf") == "qwen3-1.7b"
    assert paired_draft("/models/unknown.gguf") is None
    entry = '[models.t]\nfile = "t.gguf"\n[[models.t.sources]]\ntype = "file"\npath = "t.gguf"\n'
    pairs = '[pairs.default]\ntarget = "t"\ndraft = "t"\n'
    local_registry(entry + "[models.t.sampling]\ntemp = 0.5\n[models.t.sampling.thinking]\ntop_k = 10\n" + pairs)
    assert registry_sets("t") == ("t", {"default": {"temp": 0.5}, "thinking": {"top_k": 10}})
    local_registry(entry + "[models.t.sampling]\ntop_p = 1.5\n" + pairs)
    with pytest.raises(ConfigError, match="top_p = 1.5 is out of range"):
        from localspec.models.registry import registry

        registry()
    # a broken registry stops nothing that names a file: no entry, no paired draft
    assert registry_sets("t") is None and paired_draft("t") is None


# ------------------------------------------------------------------ vocab check
def test_vocab_check_allows_padding_up_to_128(files):
    target = model(files.target)
    assert model(files.pad128).n_vocab == target.n_vocab - 128
    from localspec.backend import check_vocab_compat

    check_vocab_compat(target, model(files.pad128))  # llama.cpp's rule: sizes within 128, same texts
    with pytest.raises(VocabMismatchError, match="differ by 129"):
        check_vocab_compat(target, model(files.pad129))


# ------------------------------------------------------------------ TUI
def test_tui_thinking_block_folds_and_keeps_colours():
    import asyncio

    from localspec.events import Rejected
    from localspec.tui import LocalspecApp
    from localspec.tui.transcript import STYLES
    from tests.support.replay import FakeSession, fake_factory, send_and_wait

    class ThinkingFake(FakeSession):
        think_markers = M
        kwargs: list = []

        def render(self, messages, *, template_kwargs=None):
            return "prompt" + ("" if (template_kwargs or {}).get("enable_thinking", True) else "<think></think>")

        def chat(self, user_text, cfg, **kw):
            self.kwargs.append(kw)
            return super().chat(user_text, cfg)

    script = [
        Written((1,), "<think>", "target"),
        Accepted(0, 2, (10, 11), "\nlet me"), Rejected(0, (12,), " nope"), Written((13,), " think", "correction"),
        StatsUpdate(Stats(method="sd", n_tokens=4, iterations=2, target_calls=2, seconds=1.5)),
        Accepted(0, 1, (2,), "</think>"), Accepted(0, 2, (14, 15), "\n\nThe answer"), Written((16,), " is 4.", "bonus"),
        StatsUpdate(Stats(method="sd", n_tokens=8, iterations=3, target_calls=3, seconds=2.0)),
    ]
    fake = ThinkingFake([script])
    app = LocalspecApp(fake_factory(fake), GenConfig(method="sd"))
    seen: dict[str, Text] = {}

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await send_and_wait(pilot, "2+2?")
            seen["folded"] = app.query(".answer").nodes[-1].content
            await pilot.press("f4")
            await pilot.pause()
            seen["open"] = app.query(".answer").nodes[-1].content
            await pilot.press("f5")  # auto -> on for the next turn
            await send_and_wait(pilot, "again")

    from rich.text import Text

    asyncio.run(main())
    folded, opened = seen["folded"].plain, seen["open"]
    assert folded.startswith("▸ thought for 5 tokens, 1.5 s, block eff 2.00\n") and folded.endswith("The answer is 4.")
    assert "let me" not in folded and "<think>" not in folded
    assert opened.plain == "let me nope think\nThe answer is 4."
    styles = {opened.plain[s.start:s.end]: str(s.style) for s in opened.spans}
    assert styles["let me"] == f"{STYLES['draft']} dim" and styles[" think"] == f"{STYLES['correction']} dim"
    assert styles[" nope"] == f"{STYLES['rejected']} dim" and styles[" is 4."] == STYLES["bonus"]
    assert fake.kwargs == [{}, {"template_kwargs": {"enable_thinking": True}}]
    pieces = feed_all(ReasoningSplitter(M), [w("<think>\n a \n</think>\n\nB")])  # the offsets the TUI places by
    assert [(p.segment, p.start, p.start + len(p.text)) for p in pieces] == [("reasoning", 9, 10), ("answer", 22, 23)]
