"""Pure tests of the TUI's span model and stats panel (no Textual app running)."""

from __future__ import annotations

from rich.text import Text

from localspec.events import Accepted, Cut, Done, Drafted, Judged, Rejected, Stats, Written
from localspec.tui.stats import PanelInfo, acceptance_rate, bars, fit, render_stats
from localspec.tui.transcript import STYLES, Transcript
from tests.support.replay import demo_turns


def styled_runs(text: Text) -> list[tuple[str, str]]:
    """(substring, style) for each span of a rendered Text, in order."""
    return [(text.plain[s.start : s.end], str(s.style)) for s in text.spans]


def replay_demo() -> Transcript:
    t = Transcript()
    for i, events in enumerate(demo_turns()):
        t.begin_turn(f"prompt {i}")
        t.apply_all(events)
    return t


def test_visible_answer_is_accepted_plus_written() -> None:
    t = replay_demo()
    for turn in t.turns:
        assert turn.done is not None
        assert turn.answer() == turn.done.text


def test_styles_per_provenance() -> None:
    t = replay_demo()
    runs = styled_runs(t.render_turn(t.turns[0]))
    assert ("Here is a", STYLES["draft"]) in runs
    assert (" simple", STYLES["rejected"]) in runs
    assert (" Python", STYLES["correction"]) in runs
    assert (" function that reverses a", STYLES["ngram"]) in runs  # the prompt lookup's span
    assert (" string", STYLES["bonus"]) in runs
    assert ("def", STYLES["correction"]) in runs
    assert ("import", STYLES["rejected"]) in runs
    assert ("This uses slicing", STYLES["rejected"]) in runs
    runs2 = styled_runs(t.render_turn(t.turns[1]))
    assert ("[::-1]", STYLES["target"]) in runs2


def test_accepted_text_is_styled_by_its_proposer() -> None:
    """Each proposer's accepted span has its own style (a lookup's differs from the draft
    model's and from every target kind), is part of the answer, and its rejected tail is
    rejected text like any other; a source with no colour of its own shows as draft text."""
    t = Transcript()
    t.begin_turn("q")
    t.apply_all([
        Drafted(((1, 2),), ("ab",), "ngram"), Accepted(0, 2, (1, 2), "ab", "ngram"), Written((3,), "c", "bonus"),
        Drafted(((4, 5),), ("de",), "suffix"), Accepted(0, 1, (4,), "d", "suffix"),
        Rejected(0, (5,), "e", "suffix"), Written((6,), "f", "correction"),
        Drafted(((7,),), ("g",)), Accepted(0, 1, (7,), "g"), Written((8,), "h", "bonus"),
        Drafted(((9,),), ("i",), "eagle"), Accepted(0, 1, (9,), "i", "eagle"),
    ])
    assert [(s.text, s.kind) for s in t.current.spans] == [
        ("ab", "ngram"), ("c", "bonus"), ("d", "suffix"), ("e", "rejected"), ("f", "correction"),
        ("g", "draft"), ("h", "bonus"), ("i", "draft")]
    assert t.current.answer() == "abcdfghi"
    runs = styled_runs(t.render_turn(t.current))
    assert ("ab", STYLES["ngram"]) in runs and ("d", STYLES["suffix"]) in runs and ("g", STYLES["draft"]) in runs
    kinds = ("draft", "ngram", "suffix", "grammar", "correction", "bonus", "target", "rejected")
    assert len({STYLES[k] for k in kinds}) == len(kinds)  # no two provenances look alike


def test_the_legend_shows_every_proposer_in_its_style() -> None:
    from localspec.tui.help import help_text

    runs = styled_runs(help_text())
    for kind in ("draft", "ngram", "suffix", "grammar"):
        assert any(style == STYLES[kind] for _, style in runs), kind
    assert ("ngram", STYLES["ngram"]) in runs and ("suffix", STYLES["suffix"]) in runs
    assert "prompt lookup" in help_text().plain and "suffix store" in help_text().plain


def test_rejected_goes_right_after_accepted_even_if_it_arrives_late() -> None:
    t = Transcript()
    t.begin_turn("q")
    t.apply_all(
        [
            Drafted(((1, 2, 3),), ("abcd",)),
            Accepted(0, 1, (1,), "ab"),
            Written((9,), "X", "correction"),
            Rejected(0, (2, 3), "cd"),
            Drafted(((4,),), ("e",)),
            Accepted(0, 1, (4,), "e"),
            Written((8,), "!", "bonus"),
        ]
    )
    kinds = [(s.text, s.kind) for s in t.current.spans]
    assert kinds == [
        ("ab", "draft"),
        ("cd", "rejected"),
        ("X", "correction"),
        ("e", "draft"),
        ("!", "bonus"),
    ]
    assert t.current.answer() == "abXe!"


def test_rejected_tail_of_a_losing_draft_is_not_shown() -> None:
    t = Transcript()
    t.begin_turn("q")
    t.apply_all(
        [
            Drafted(((1, 2), (1, 3)), ("ab", "ac")),
            Accepted(1, 1, (1,), "a"),
            Rejected(0, (2,), "b"),
            Rejected(1, (3,), "c"),
        ]
    )
    assert [(s.text, s.kind) for s in t.current.spans] == [("a", "draft"), ("c", "rejected")]


def parse_events() -> list:
    drafted = "aaaa bbbb cccc dddd"
    # cuts after "aaaa " (5), "aaaa bbbb " (10, chosen), "... cccc " (15), whole (19)
    return [
        Drafted(((1,) * 8,), (drafted,)),
        Judged("likelihood", (2, 4, 6, 8), (5, 10, 15, 19), (0.9, 0.7, 0.2, 0.1), 0.5),
        Cut(4, 8, 10),
        Accepted(0, 4, (1,) * 4, drafted[:10]),
        Rejected(0, (1,) * 4, drafted[10:]),
        Written((5,), "EEEE", "target"),
        Done("eog", drafted[:10] + "EEEE", Stats(method="parse")),
    ]


def test_parse_cut_markers_scores_and_t_star() -> None:
    t = Transcript()
    t.begin_turn("q")
    t.apply_all(parse_events())
    spans = [(s.text, s.kind) for s in t.current.spans]
    assert spans == [
        ("aaaa ", "draft"),
        ("‹0.90›", "cut"),
        ("bbbb ", "draft"),
        ("‹t* 0.70›", "tstar"),
        ("cccc ", "rejected"),
        ("‹0.20›", "cut"),
        ("dddd", "rejected"),
        ("‹0.10›", "cut"),
        ("EEEE", "target"),
    ]
    runs = styled_runs(t.render_turn(t.current))
    assert ("‹t* 0.70›", STYLES["tstar"]) in runs
    assert ("‹0.90›", STYLES["cut_pass"]) in runs  # above the threshold
    assert ("‹0.20›", STYLES["cut_fail"]) in runs  # below it
    assert t.current.answer() == "aaaa bbbb EEEE"


def test_hiding_rejected_hides_cut_markers_inside_it_but_keeps_t_star() -> None:
    t = Transcript()
    t.begin_turn("q")
    t.apply_all(parse_events())
    plain = t.render_turn(t.current, show_rejected=False).plain
    assert plain == "aaaa ‹0.90›bbbb ‹t* 0.70›EEEE"
    shown = t.render_turn(t.current, show_rejected=True).plain
    assert "cccc ‹0.20›dddd‹0.10›" in shown


def test_parse_t_star_zero_without_accepted_event() -> None:
    t = Transcript()
    t.begin_turn("q")
    t.apply_all(
        [
            Drafted(((1, 2),), ("xy",)),
            Judged("likelihood", (0, 2), (0, 2), (0.6, 0.1), 0.5),
            Cut(0, 2, 0),
            Rejected(0, (1, 2), "xy"),
        ]
    )
    assert [(s.text, s.kind) for s in t.current.spans] == [
        ("‹t* 0.60›", "tstar"),
        ("xy", "rejected"),
        ("‹0.10›", "cut"),
    ]


def test_bars_use_a_fixed_scale() -> None:
    assert bars([0.0, 0.5, 1.0], 1.0) == " ▅█"
    assert bars([0.9, 0.9], 1.0) == "▇▇"  # flat high acceptance stays high
    assert bars([1, 2], 0) == "  "
    assert fit([1, 1, 1, 1], 2, sum) == [2, 2]
    assert fit([1, 2], 5, sum) == [1, 2]


def test_stats_panel_contents() -> None:
    events = demo_turns()[0]
    done = events[-1]
    assert isinstance(done, Done)
    stats = done.stats
    info = PanelInfo(target_name="T-model", draft_name="D-model", method="auto", state="ready")
    panel = render_stats(stats, info).plain
    assert "T-model" in panel and "D-model" in panel
    assert "auto → mdbv" in panel
    assert "K=2  L=4" in panel
    assert f"{stats.tok_per_s:6.1f}" in panel
    assert f"{stats.block_efficiency:6.2f}" in panel
    alpha = acceptance_rate(stats)
    assert alpha is not None and f"{alpha:6.0%}" in panel
    assert "auto: mdbv K=2 L=4" in panel
    assert "draft" in panel and "verify" in panel and "other" in panel
    assert "accepted length" in panel and "acceptance by position" in panel


def test_stats_panel_splits_tokens_and_acceptance_per_proposer() -> None:
    """Demo turn 1 drafts once by prompt lookup (4 of 4 accepted): the panel splits the
    accepted / drafted tokens between the lookup and the draft model (the rest); a turn
    where only the draft model drafted shows no split (accept α already is its rate)."""
    stats = demo_turns()[0][-1].stats
    assert stats.proposed == {"ngram": (4, 4)}
    d_drafted, d_accepted = stats.drafted - 4, sum(stats.accepted_lengths) - 4
    assert 0 < d_accepted < d_drafted
    text = render_stats(stats, PanelInfo())
    lines = text.plain.splitlines()
    assert any("by proposer" in ln for ln in lines)
    assert any(ln.split() == ["draft", str(d_accepted), "/", str(d_drafted), f"{d_accepted / d_drafted:.0%}"]
               for ln in lines), lines
    assert any(ln.split() == ["ngram", "4", "/", "4", "100%"] for ln in lines), lines
    assert not any(ln.split()[:1] == ["suffix"] for ln in lines)  # it drafted nothing: no row
    # each proposer's name is coloured as its accepted text is in the conversation
    names = {text.plain[s.start:s.end].strip(): str(s.style) for s in text.spans}
    assert names["ngram"] in STYLES["ngram"] and names["draft"] == STYLES["draft"]
    parse = demo_turns()[1][-1].stats
    assert "by proposer" not in render_stats(parse, PanelInfo()).plain


def test_stats_panel_shows_where_each_model_runs() -> None:
    """The GPU/CPU split of each model (the session's placement), as `localspec devices` says it."""
    info = PanelInfo(target_name="T", draft_name="D", method="auto", state="ready",
                     placement={"target": "CUDA0 20 + CPU 45 of 65 layers", "draft": "CUDA0 29/29 layers"})
    lines = render_stats(None, info).plain.splitlines()
    assert any("target" in ln and "CUDA0 20 + CPU 45 of 65 layers" in ln for ln in lines)
    assert any("draft" in ln and "CUDA0 29/29 layers" in ln for ln in lines)


def test_stats_panel_before_any_generation() -> None:
    panel = render_stats(None, PanelInfo()).plain
    assert "no generation yet" in panel


def test_model_paths_are_shortened_to_file_names() -> None:
    from localspec.tui.app import short_name

    assert short_name("/root/.cache/models/SmolLM2-135M.Q4_1.gguf") == "SmolLM2-135M.Q4_1.gguf"
    assert short_name("qwen2.5-coder-1.5b") == "qwen2.5-coder-1.5b"
    assert short_name(None) is None


def test_forced_grammar_tokens_have_a_span_of_their_own() -> None:
    t = Transcript()
    t.begin_turn("q")
    t.apply_all([Drafted(((1, 2),), ('{"',), "grammar"), Accepted(0, 2, (1, 2), '{"', "grammar"),
                 Written((3,), "a", "bonus")])
    assert [(s.text, s.kind) for s in t.current.spans] == [('{"', "grammar"), ("a", "bonus")]
    assert ('{"', STYLES["grammar"]) in styled_runs(t.render_turn(t.current))


def test_stats_panel_sets_the_forecast_beside_the_measured_speed() -> None:
    """auto's forecast of the iterations it ran (costmodel/forecast.py) is a row of its own,
    labelled as the cost model's expectation; a turn without one (a fixed method) has none."""
    stats = demo_turns()[0][-1].stats
    assert "forecast" not in render_stats(stats, PanelInfo()).plain
    stats.forecast = [40.0, 2.0]  # 40 tokens expected in 2 s
    lines = render_stats(stats, PanelInfo()).plain.splitlines()
    assert any(ln.split()[:2] == ["forecast", "20.0"] and "expected" in ln for ln in lines), lines
    assert stats.forecast_tok_per_s == 20.0
    stats.forecast = [1.0, 0.0]
    assert stats.forecast_tok_per_s is None
