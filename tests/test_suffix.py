"""Suffix decoding (`--spec-type suffix`): the session-wide store, its proposer, its scope.

The store is checked against brute force (counts, the longest match), for what its walk
chooses (the most frequent child, the confidence stop, the length cap) and for its memory
bound (eviction keeps it, and leaves what a fresh store of the kept documents would be). On
SmolLM2: every drafted answer is AR's greedy text; a turn finds what an earlier turn wrote,
and a served request what an earlier request wrote, though neither prompt contains it. The
enumeration that proves point-mass drafts exact (any deterministic draft, which a suffix
draft is) is tests/test_verify_exact.py's `pointmass` cases.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from localspec.config import GenConfig, SamplingConfig
from localspec.decode.drafters.base import DraftRequest
from localspec.decode.drafters.combine import ChainDrafter
from localspec.decode.drafters.lookup import NgramDrafter
from localspec.decode.drafters.suffix import OVERLAP, SuffixDrafter, SuffixStore
from localspec.errors import ConfigError
from localspec.events import Stats
from tests.test_lookup import EDIT, greedy, sources_agree_with_stats

COUNT = "1, 2, 3, 4, 5,"  # SmolLM2 keeps counting: its answer holds "10, 11, 12, 13, ..."
LATER = "10, 11, 12,"  # a prompt whose continuation only that earlier answer contains


def random_docs(seed: int, n: int = 12, size: int = 60, vocab: int = 5) -> list[list[int]]:
    g = np.random.default_rng(seed)
    return [[int(t) for t in g.integers(0, vocab, size=int(g.integers(size // 2, size)))] for _ in range(n)]


def brute_count(docs: list[list[int]], pattern: list[int]) -> int:
    k = len(pattern)
    return sum(d[i:i + k] == pattern for d in docs for i in range(len(d) - k + 1))


# ---------------------------------------------------------------- the store
def store_of(docs: list[list[int]], **kw) -> SuffixStore:
    store = SuffixStore(**kw)
    for d in docs:
        store.insert(d)
    return store


def test_counts_are_the_occurrences_in_every_document():
    docs = random_docs(0)
    store = store_of(docs)
    g = np.random.default_rng(1)
    for _ in range(200):
        d = docs[int(g.integers(len(docs)))]
        k = int(g.integers(2, 6))
        i = int(g.integers(0, len(d) - k + 1))
        pat = d[i:i + k]
        assert store.count(pat) == brute_count(docs, pat) > 0
    assert store.count([7, 7]) == 0  # never seen
    with pytest.raises(ValueError):
        store.count([1])


def test_the_longest_match_is_found_within_the_depth():
    docs = random_docs(2)
    store = store_of(docs)
    g = np.random.default_rng(3)
    for _ in range(100):
        ctx = [int(t) for t in g.integers(0, 5, size=30)]
        got, ends = store.longest_match(ctx, depth=8)
        want = max((k for k in range(2, 9) if brute_count(docs, ctx[-k:])), default=0)
        assert got == want
        if got:
            assert len(ends) == brute_count(docs, ctx[-got:])
            assert all(store.buf[e - got + 1:e + 1].tolist() == ctx[-got:] for e in ends)


def test_the_walk_takes_the_most_frequent_child_and_stops_when_unsure():
    store = SuffixStore()
    for d in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 3, 7], [9, 1, 2, 3, 4, 6]):
        store.insert(d)
    # after "1 2 3": 4 three times in four (the fourth went on with 7), then 6 twice in three
    d = store.speculate([0, 1, 2, 3], L=8, depth=8, min_prob=0.1, factor=4)
    assert d.tokens == [4, 6] and d.probs == pytest.approx([3 / 4, 3 / 4 * 2 / 3]) and d.match == 3
    assert d.score == pytest.approx(sum(d.probs))
    # a draft stops before a token whose chance falls below min_prob
    assert store.speculate([0, 1, 2, 3], L=8, depth=8, min_prob=0.6, factor=4).tokens == [4]
    assert store.speculate([0, 1, 2, 3], L=8, depth=8, min_prob=0.8, factor=4).tokens == []
    # at most factor x the match, and L
    assert store.speculate([0, 1, 2, 3], L=8, depth=8, min_prob=0.1, factor=1 / 3).tokens == [4]
    assert store.speculate([0, 1, 2, 3], L=1, depth=8, min_prob=0.1, factor=4).tokens == [4]
    # a longer match is a different node: "9 1 2 3" went on with 4 6, for sure
    d = store.speculate([9, 1, 2, 3], L=8, depth=8, min_prob=0.5, factor=4)
    assert d.tokens == [4, 6] and d.probs == [1.0, 1.0] and d.match == 4
    # ties go to the newest occurrence
    tie = SuffixStore()
    tie.insert([5, 6, 1])
    tie.insert([5, 6, 2])
    assert tie.speculate([5, 6], L=2, min_prob=0.1, factor=2).tokens == [2]


def test_sync_extends_in_place_and_stores_a_shared_history_once():
    g = np.random.default_rng(4)
    history = [int(t) for t in g.integers(0, 50, size=400)]
    store, once = SuffixStore(), SuffixStore()
    for i in range(10, len(history) + 1, 7):  # a turn: the history grows a few tokens at a time
        store.sync(history[:i])
    store.sync(history)
    once.sync(history)
    assert store.n_docs == 1 and store.index == once.index and (store.buf == once.buf).all()
    # a request that shares the first 300 tokens (a resent conversation, another branch of it)
    other = history[:300] + [int(t) for t in g.integers(50, 99, size=100)]
    store.sync(other)
    assert store.n_docs == 2 and store.live == len(history) + OVERLAP + 100
    assert store.count(other[-30:]) == 1 and store.count(history[280:320]) == 1


def test_the_memory_bound_evicts_the_oldest_documents():
    docs = random_docs(5, n=60, size=200, vocab=40)
    store = SuffixStore(max_tokens=2000)
    for d in docs:
        store.insert(d)
        assert store.live <= store.max_tokens
    assert store.rebuilds > 0
    kept = docs[-store.n_docs:]
    assert store.live == sum(map(len, kept))
    fresh = store_of(kept)
    assert store.index == fresh.index and (store.buf[:store.n] == fresh.buf[:fresh.n]).all()
    # the open document alone longer than the bound: its newest tokens stay, and it still grows
    g = np.random.default_rng(6)
    long = [int(t) for t in g.integers(0, 40, size=5000)]
    store.sync(long)
    assert store.live <= store.max_tokens and store.count(long[-20:]) == 1 and store.count(long[:20]) == 0
    store.sync([*long, 1, 2, 3])
    assert store.count([*long[-5:], 1, 2, 3]) == 1


# ---------------------------------------------------------------- the proposer
def test_a_suffix_draft_is_a_point_mass_chain_with_its_confidences():
    store = SuffixStore()
    store.insert([1, 2, 3, 4, 5, 6])
    p = SuffixDrafter(store, min_prob=0.1, factor=2)
    assert p.propose(DraftRequest([8, 9], 1, 4)) is None and p.matched == 0  # nothing matches
    trie = p.propose(DraftRequest([8, 9, 2, 3], 1, 4))  # the turn went on
    assert trie is not None and trie.source == "suffix" and trie.draft_calls == 0 and p.matched == 2
    assert [n.token for n in trie.nodes] == [4, 5, 6] and trie.path == [[0, 1, 2]]  # then the document ended
    assert all(r.ids.tolist() == [t] and r.probs.tolist() == [1.0] for r, t in zip(trie.q[0], [4, 5, 6], strict=True))
    assert trie.conf == [[1.0, 1.0, 1.0]]
    assert [n.token for n in p.propose(DraftRequest([8, 9, 2, 3], 1, 2)).nodes] == [4, 5]  # auto's second ask: cut to its L
    assert store.n_docs == 2 and store.open.history == [8, 9, 2, 3]  # the turn's history, one document


def test_chains_put_the_suffix_anywhere():
    store = SuffixStore()
    store.insert([1, 2, 3, 4, 5])
    chain = ChainDrafter([NgramDrafter(2, 3), SuffixDrafter(store)])
    trie = chain.propose(DraftRequest([0, 2, 3], 1, 4))  # no n-gram repeats in the history; the store has it
    assert trie.source == "suffix" and chain.matched == 2
    trie = chain.propose(DraftRequest([0, 2, 3, 9, 0, 2], 1, 4))  # the history repeats itself: the lookup drafts
    assert trie.source == "ngram" and isinstance(chain.last, NgramDrafter)


def test_the_config_knows_the_suffix_proposer():
    cfg = GenConfig(spec_type=("suffix", "draft"))
    cfg.validate()
    assert cfg.proposers == ("suffix", "draft")
    assert not GenConfig(method="sd", spec_type=("suffix",)).needs_draft_model
    with pytest.raises(ConfigError, match="--spec-type suffix drafts one continuation"):
        GenConfig(method="mdbv", K=2, spec_type=("suffix",)).validate()
    for kw, flag in ((dict(suffix_depth=1), "--spec-suffix-depth"), (dict(suffix_min_prob=1.5), "--spec-suffix-min-prob"),
                     (dict(suffix_factor=0), "--spec-suffix-factor"), (dict(suffix_max_tokens=10), "--spec-suffix-max-tokens")):
        with pytest.raises(ConfigError, match=flag):
            GenConfig(**kw).validate()


def test_stats_count_each_proposer_and_merge_them():
    a, b = Stats(), Stats()
    a.record_proposed("suffix", 8, 5)
    a.record_proposed("ngram", 4, 1)
    b.record_proposed("suffix", 2, 2)
    m = a.merged(b)
    assert m.proposed == {"suffix": (10, 7), "ngram": (4, 1)} and a.proposed["suffix"] == (8, 5)
    assert m.lookup_drafted == 14 and m.lookup_accepted == 8
    a.record(5, 8)
    a.record(1, 4)
    j = a.to_json()["proposers"]
    assert j["suffix"] == {"drafted": 8, "accepted": 5, "acceptance": 5 / 8}
    assert j["ngram"] == {"drafted": 4, "accepted": 1, "acceptance": 0.25}
    assert j["draft"] == {"drafted": 0, "accepted": 0, "acceptance": None}  # nothing drafted: no rate
    a.record(3, 4)  # a verification of the draft model's: its share is what the lookups did not draft
    assert a.to_json()["proposers"]["draft"] == {"drafted": 4, "accepted": 3, "acceptance": 0.75}
    assert a.copy().proposed is not a.proposed


@pytest.mark.parametrize("shared", [False, True])
def test_bench_suffix_measures_the_python_work(capsys, shared):
    from localspec.bench import suffix

    suffix.main(argparse.Namespace(tokens=20_000, max_tokens=1_000_000, L=16, depth=24, min_prob=0.1,
                                   shared=shared))
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| edit") or line.startswith("| new")}
    assert set(rows) == {"edit", "new"}
    accepted = float(rows["edit"].split("|")[-2])
    assert accepted > 2  # the edit repeats a stored file: long drafts are right (a slot: from the shared store)
    assert "eviction at" in out and ("a slot over the shared store" in out) == shared


# ---------------------------------------------------------------- on a real model
@pytest.fixture(scope="module")
def edit_ar(smollm2_path) -> str:
    """AR's greedy answer to EDIT: the text every drafted run must give."""
    from tests.support.helpers import session

    return list(session(smollm2_path).generate(EDIT, greedy("ar")))[-1].text


@pytest.mark.parametrize(("method", "kinds"), [("sd", ("suffix",)), ("gbv", ("suffix",)),
                                               ("sd", ("ngram", "suffix")), ("sd", ("suffix", "draft"))])
def test_suffix_drafts_alone_and_in_chains_give_ar_text(edit_ar, smollm2_path, smollm2_q4_0_path, method, kinds):
    from tests.support.helpers import session

    s = session(smollm2_path, smollm2_q4_0_path)  # its own store: no earlier test's answers in it
    events = list(s.generate(EDIT, greedy(method, L=6, spec_type=kinds)))
    done = events[-1]
    st, j = done.stats, done.stats.to_json()["proposers"]
    assert done.text == edit_ar and j[kinds[0]]["drafted"] > 0
    iters = sources_agree_with_stats(events, st)  # the draft events name who wrote them
    assert kinds[0] in iters and set(iters) <= set(kinds)
    assert any(0 < t < 6 for t in st.accepted_lengths) and st.target_calls < st.n_tokens
    if kinds == ("suffix",):
        assert st.draft_calls == 0 and set(st.proposed) == {"suffix"}
    if "draft" in kinds:  # the draft model drafted where the store had nothing sure enough
        assert j["draft"]["drafted"] > 0 and st.draft_calls > 0


def test_a_turn_finds_what_an_earlier_turn_wrote(smollm2_path):
    """The later prompt holds none of the numbers after 12; only the first turn's answer
    does: drafted from the store, the second turn needs far fewer target calls."""
    from tests.support.helpers import session

    s, fresh = session(smollm2_path), session(smollm2_path)
    first = list(s.generate(COUNT, greedy("sd", L=8, n=48, spec_type=("suffix",))))[-1]
    assert " 13, 14, 15" in first.text
    later = list(s.generate(LATER, greedy("sd", L=8, n=32, spec_type=("suffix",))))[-1]
    alone = list(fresh.generate(LATER, greedy("sd", L=8, n=32, spec_type=("suffix",))))[-1]
    ar = list(fresh.generate(LATER, greedy("ar", n=32)))[-1]
    assert later.text == alone.text == ar.text
    assert later.stats.proposed["suffix"][1] >= alone.stats.proposed["suffix"][1] + 8
    assert later.stats.target_calls < alone.stats.target_calls
    assert s.suffix.n_docs == 2 and fresh.suffix.n_docs == 1


def test_a_chat_keeps_one_document_of_the_whole_conversation(smollm2_path):
    """Every turn's prompt and answer is in the store once: the next turn's prompt extends
    the conversation so far, so it grows the same document."""
    from tests.support.helpers import session

    s = session(smollm2_path)
    cfg = greedy("sd", L=4, n=24, spec_type=("suffix",))
    list(s.chat("Name three colors.", cfg))
    list(s.chat("Repeat your answer exactly.", cfg))
    assert s.suffix.n_docs == 1 and s.suffix.open.history == s.target.committed
    assert s.suffix.live == len(s.target.committed)


def test_auto_without_a_draft_model_drafts_by_suffix_where_it_pays(smollm2_path, monkeypatch, tmp_path):
    """auto's gate prices suffix drafts as it does n-gram ones, per (proposer, match length)."""
    from localspec import costmodel
    from localspec.costmodel import CostCurve
    from tests.support.helpers import session

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    monkeypatch.setattr(costmodel, "load_curve", lambda ctx: CostCurve([1, 64], [0.010, 0.012]))
    s = session(smollm2_path)
    ref = list(s.generate(EDIT, greedy("ar")))[-1]
    cfg = GenConfig(method="auto", n_predict=96, seed=1, sampling=SamplingConfig(temp=0.0), auto_K=True,
                    auto_L=True, spec_type=("suffix",))
    done = list(s.generate(EDIT, cfg))[-1]
    assert done.text == ref.text and done.stats.proposed["suffix"][0] > 0 and "suffix" in done.stats.ran
    assert done.stats.target_calls < ref.stats.target_calls
    assert s.costs.lookup.trials and all(k[0] == "suffix" for k in s.costs.lookup.trials)


def test_a_served_request_finds_what_an_earlier_request_wrote(smollm2_path):
    """`serve` has one session: its store is shared by every request."""
    from localspec.server.app import ServerConfig, create_app
    from localspec.server.schema import Limits
    from tests.support.helpers import session
    from tests.test_server import ServerThread

    cfg = greedy("sd", L=8, n=32, spec_type=("suffix",))
    srv = ServerThread(create_app(session(smollm2_path), ServerConfig(model_id="smollm2", limits=Limits(cfg=cfg, n_ctx=2048))))
    try:
        def complete(prompt: str, n: int) -> dict:
            r = httpx.post(srv.url + "/v1/completions", timeout=60,
                           json={"model": "smollm2", "prompt": prompt, "max_tokens": n, "temperature": 0})
            assert r.status_code == 200, r.text
            return r.json()

        complete(COUNT, 48)
        later = complete(LATER, 32)
    finally:
        srv.stop()
    alone = list(session(smollm2_path).generate(LATER, cfg))[-1]
    assert later["choices"][0]["text"] == alone.text
    assert later["timings"]["draft_n_accepted"] >= alone.stats.proposed["suffix"][1] + 8


def test_cli_suffix_flags_and_json(smollm2_path, capsys):
    from localspec.cli.main import main

    argv = ["run", "-m", str(smollm2_path), "-p", "a b c d a b c d a b", "--raw", "-n", "8", "--temp", "0",
            "--method", "sd", "--spec-type", "suffix", "--spec-suffix-depth", "16", "--spec-suffix-min-prob", "0.2",
            "--spec-suffix-factor", "2", "--spec-suffix-max-tokens", "5000", "--json"]
    r = subprocess.run([sys.executable, "-m", "localspec.cli", *argv], capture_output=True, text=True, timeout=180,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    run = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(run["proposers"]) == {"ngram", "prediction", "suffix", "draft"} and run["proposers"]["suffix"]["drafted"] > 0
    # who wrote each part: the spans join into the text, their tokens into n_tokens, and the
    # suffix store's spans hold its accepted tokens (fewer where -n cut the last block)
    spans = run["spans"]
    assert "".join(s["text"] for s in spans) == run["text"] and sum(s["tokens"] for s in spans) == run["n_tokens"]
    assert {s["by"] for s in spans} <= {"suffix", "correction", "bonus", "target"}  # target: no sure draft there
    assert 0 < sum(s["tokens"] for s in spans if s["by"] == "suffix") <= run["proposers"]["suffix"]["accepted"]
    assert all(a["by"] != b["by"] for a, b in zip(spans, spans[1:], strict=False))  # one author, one span
    assert main(["run", "-m", str(smollm2_path), "-p", "hi", "--spec-type", "suffix", "--spec-suffix-min-prob", "2"]) == 2
    err = capsys.readouterr().err  # refused before any model loads
    assert len(err.strip().splitlines()) == 1 and "--spec-suffix-min-prob" in err
