"""bench speed's pure pieces: the grid and the K-drafts-vs-one decomposition."""

from __future__ import annotations

import pytest

from localspec.bench.runner import Run
from localspec.bench.speed import multi_vs_single, parse_grid, predicted_vs_measured


def test_grid_makes_single_draft_methods_k1_and_dedupes() -> None:
    labels = [c.label for c in parse_grid(["auto", "sd", "mdbv"], ["1:4", "2:4", "4:8"])]
    assert labels == ["ar", "auto", "sd K=1 L=4", "sd K=1 L=8", "mdbv K=1 L=4", "mdbv K=2 L=4",
                      "mdbv K=4 L=8"]


def _run(label: str, prompt: str, tokens: int, iters: int, seconds: float) -> Run:
    return Run("", prompt, "", 1, 0, 0.0, tokens / seconds, tokens, iters, iterations=iters, label=label)


def test_multi_vs_single_splits_speed_into_block_efficiency_and_cost() -> None:
    configs = parse_grid(["sd", "mdbv"], ["1:4", "2:4", "2:8"])
    results = [
        # sd L=4: 200 tokens in 50 calls of 0.1 s, twice -> BE 4.0, 0.1 s per iteration
        _run("sd K=1 L=4", "a", 200, 50, 5.0), _run("sd K=1 L=4", "b", 200, 50, 5.0),
        # K=2: 200 tokens in 40 calls of 0.15 s -> BE 5.0 (x1.25), cost x(0.1/0.15)
        _run("mdbv K=2 L=4", "a", 200, 40, 6.0), _run("mdbv K=2 L=4", "b", 200, 40, 6.0),
        _run("mdbv K=1 L=4", "a", 200, 45, 5.0),
        _run("mdbv K=2 L=8", "a", 200, 30, 6.0),  # no sd L=8 in the run: no row
    ]
    md, out = multi_vs_single(results, configs)
    assert set(out) == {"mdbv K=2 L=4"}
    r = out["mdbv K=2 L=4"]
    assert r["vs"] == "sd K=1 L=4"
    assert r["be_ratio"] == pytest.approx(1.25)
    assert r["cost_ratio"] == pytest.approx(0.1 / 0.15)
    # the product is the pooled tok/s ratio: 400/12 s vs 400/10 s
    assert r["speed_ratio"] == pytest.approx((400 / 12) / (400 / 10))
    assert "| mdbv K=2 L=4 | sd K=1 L=4 | 1.250 | 0.667 | 0.833 |" in md


def test_dyn_holds_auto_to_the_grid_and_compares_with_dyn_k1() -> None:
    import argparse

    configs = parse_grid(["dyn"], ["1:8", "2:8"])
    assert [c.label for c in configs] == ["ar", "auto K=1 L<=8", "auto K=2 L<=8"]
    a = argparse.Namespace(n_predict=8, draft_temp=None, temp=0.7, auto_free=True)
    g = configs[2].gen(a, seed=0)
    assert g.method == "auto" and g.K == 2 and g.L == 8 and not g.auto_K and not g.auto_L
    results = [_run("auto K=1 L<=8", "a", 100, 20, 4.0), _run("auto K=2 L<=8", "a", 100, 16, 4.0)]
    _, out = multi_vs_single(results, configs)
    assert out["auto K=2 L<=8"]["vs"] == "auto K=1 L<=8"
    assert out["auto K=2 L<=8"]["be_ratio"] == pytest.approx(1.25)


def test_multi_vs_single_is_empty_without_multi_draft_columns() -> None:
    configs = parse_grid(["auto", "sd"], ["1:4"])
    md, out = multi_vs_single([_run("sd K=1 L=4", "a", 100, 25, 2.0)], configs)
    assert md == "" and out == {}


def test_predicted_vs_measured_sets_the_cost_models_promise_beside_the_result() -> None:
    def auto(prompt: str, tok_s: float, predicted: list[float]) -> Run:
        # 100 tokens in 20 target passes over 100 / tok_s seconds
        r = Run("", prompt, "auto", 1, 8, 0.0, tok_s, 100, 20, seconds=100 / tok_s, label="auto")
        # (speedup, tokens per pass, seconds per pass) per decision; the last one's factors differ
        r.extra["predicted"] = [[x, 4.0, 0.5] for x in predicted[:-1]] + [[predicted[-1], 6.0, 0.2]]
        return r

    results = [
        Run("", "a", "ar", 1, 0, 0.0, 10.0, label="ar"), Run("", "b", "ar", 1, 0, 0.0, 5.0, label="ar"),
        auto("a", 20.0, [1.5, 2.5]),  # measured 2.0x, predicted 2.5x at the end
        auto("b", 15.0, [1.5, 2.0, 3.0]),  # measured 3.0x, predicted 3.0x at the end
        auto("c", 9.0, [2.0]),  # no AR run of this prompt: left out
        Run("", "a", "sd", 1, 8, 0.0, 30.0, label="sd K=1 L=8"),  # not auto: no prediction
    ]
    # what auto expected of the iterations it ran: [tokens, seconds, the AR step it priced];
    # prompt b's run has none (a run before the forecast): it counts for the rest only
    results[2].extra["forecast"] = [100.0, 4.0, 0.1]  # 25 tok/s at a 0.1 s step: 2.5x
    md, out = predicted_vs_measured(results)
    assert set(out) == {"auto"}
    r = out["auto"]
    assert r["forecast"] == pytest.approx(2.5) and r["forecast_ratio"] == pytest.approx(2.0 / 2.5)
    assert r["forecast_per_pass"] == pytest.approx([5.0, 0.2])
    assert r["predicted_first"] == pytest.approx(1.5) and r["predicted_last"] == pytest.approx(2.75)
    assert r["measured"] == pytest.approx(2.5)
    assert r["ratio"] == pytest.approx((2.0 / 2.5 + 1.0) / 2)
    assert r["tokens_per_pass"] == pytest.approx([6.0, 5.0])  # the last prediction vs 100/20
    assert r["seconds_per_pass"] == pytest.approx([0.2, (5 / 20 + 100 / 15 / 20) / 2])
    assert "| auto | 1.50x | 2.75x | 2.50x | 2.50x | 0.90 | 0.80 | 6.00 / 5.00 / 5.00 | 200 / 200 / 292 |" in md
    assert predicted_vs_measured(results[:2]) == ("", {})


def test_alternate_order_reverses_every_other_prompt_and_each_prompts_repeats() -> None:
    from localspec.bench.common import Prompt
    from localspec.bench.runner import PEER, Spec
    from localspec.bench.speed import make_jobs

    prompts = [Prompt("code", f"p{i}", "q") for i in range(3)]
    peers = [Spec(PEER, 1, 16), Spec(PEER, 1, 16, proposers="ngram-simple")]
    jobs = make_jobs(prompts, parse_grid(["auto"], []), peers, repeats=2)
    assert [(j.prompt.id, j.reverse) for j in jobs] == [
        ("p0#0", False), ("p1#0", True), ("p2#0", False), ("p0#1", True), ("p1#1", False), ("p2#1", True)]
    assert all(j.peers == peers for j in jobs)  # every llama.cpp setting on every prompt
    assert not any(j.reverse for j in make_jobs(prompts, [], peers, repeats=2, order="fixed"))


def test_order_effect_compares_a_columns_speed_reversed_over_forward_per_prompt() -> None:
    from localspec.bench.speed import order_effect

    def r(label: str, prompt: str, tok_s: float, rev: bool | None) -> Run:
        x = Run("", prompt, "", 1, 0, 0.0, tok_s, label=label)
        if rev is not None:
            x.extra["reversed"] = rev
        return x

    runs = [r("ar", "a#0", 10.0, False), r("ar", "a#1", 11.0, True),  # a: 1.10
            r("ar", "b#0", 20.0, True), r("ar", "b#1", 18.0, False),  # b: 1.11
            r("ar", "c#0", 30.0, False),  # c ran one way only: left out
            r("auto", "a#0", 20.0, False), r("auto", "a#1", 19.0, True),
            r("fixed", "a#0", 5.0, None), r("fixed", "a#1", 9.0, None)]  # no order recorded
    eff = order_effect(runs)
    assert set(eff) == {"ar", "auto"}
    assert eff["ar"] == pytest.approx((1.1 + 20 / 18) / 2) and eff["auto"] == pytest.approx(0.95)
    assert order_effect([r("ar", "a#0", 10.0, False), r("ar", "b#0", 11.0, True)]) == {}
