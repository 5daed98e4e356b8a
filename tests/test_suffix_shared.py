"""The suffix store a pool's slots share (decode/drafters/suffix_shared.py): `serve -np N` drafts a
request from an answer another slot wrote.

Without a model: a slot finds what another slot published, the better-scored store wins,
a conversation published turn by turn is stored once, and concurrent publishes from slot
threads each land whole (the lock). On SmolLM2, a 2-slot pool: the second slot's request,
whose prompt lacks the continuation, is drafted from the first slot's answer, with AR's text.
"""

from __future__ import annotations

import threading

import pytest

from localspec.decode.drafters.suffix import OVERLAP, SuffixStore
from localspec.decode.drafters.suffix_shared import SharedSuffix, SlotSuffix
from tests.test_lookup import greedy
from tests.test_suffix import COUNT, LATER

ANSWER = list(range(100, 140))  # tokens only the first slot's answer holds


def test_a_slot_drafts_what_another_slot_published():
    shared = SharedSuffix()
    a, b = SlotSuffix(SuffixStore(), shared), SlotSuffix(SuffixStore(), shared)
    history = [1, 2, 3, *ANSWER]
    a.sync(history)
    shared.publish(history)  # what the runtime does when a's generation ends
    context = [7, 8, *ANSWER[:10]]  # another request: a different prompt, the same text begun
    b.sync(context)
    assert b.own.speculate(context, 8).tokens == []  # its own conversation has no such text
    d = b.speculate(context, 8)
    assert d.tokens == ANSWER[10:18] and d.match == 10
    assert shared.info() == {"tokens": len(history), "documents": 1, "published": 1}


def test_the_better_scored_store_wins_and_ties_go_to_the_slot_s_own():
    shared = SharedSuffix()
    own = SuffixStore()
    # the slot's own text is unsure after `head` (two continuations); the shared one is sure
    head = [1, 2, 3, 4, 5, 6]
    own.insert([*head, 40, 41, 42, 43])
    own.insert([*head, 50, 51, 52, 53])
    shared.publish([*head, 60, 61, 62, 63])
    slot = SlotSuffix(own, shared)
    assert own.speculate([9, *head], 4).score == pytest.approx(2.0)  # 4 tokens at 1/2 each
    d = slot.speculate([9, *head], 4)
    assert d.tokens == [60, 61, 62, 63] and d.score == pytest.approx(4.0)
    sure = SuffixStore()
    sure.insert([*head, 70, 71, 72, 73])
    assert SlotSuffix(sure, shared).speculate([9, *head], 4).tokens == [70, 71, 72, 73]  # a tie: its own


def test_a_conversation_published_turn_by_turn_is_stored_once():
    shared = SharedSuffix()
    first, other = [1, 2, *ANSWER], list(range(300, 340))
    shared.publish(first)
    shared.publish(first + [9, 9, 9])  # the next turn extends the open document
    assert shared.store.live == len(first) + 3 and shared.store.n_docs == 1
    shared.publish(other)  # another slot's request in between
    shared.publish(first + [9, 9, 9, 8, 8])  # a third turn: only its new part (and an overlap)
    assert shared.store.live <= len(first) + 3 + len(other) + 2 + OVERLAP
    assert shared.store.count([9, 9, 8, 8]) == 1


def test_slots_publishing_and_drafting_at_once_store_every_history_whole():
    """Four slot threads publish long histories while drafting from the store: every
    history's own marker pair is found exactly once, at its own end (no interleaving)."""
    shared = SharedSuffix(max_tokens=10_000_000)
    body = list(range(1000, 6000))
    errors: list[BaseException] = []

    def slot(i: int) -> None:
        try:
            mine = SlotSuffix(SuffixStore(), shared)
            for r in range(6):
                history = [-2 - i, *body, 90_000 + i, 80_000 + r]  # a long shared body, own marker
                mine.speculate(body[:50], 16)
                shared.publish(history)
        except BaseException as e:  # noqa: BLE001 -- reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for i in range(4):
        for r in range(6):
            assert shared.store.count([90_000 + i, 80_000 + r]) == 1
    assert shared.info()["published"] == 24


def test_a_pool_drafts_one_slot_s_request_from_another_slot_s_answer(smollm2_path):
    """LATER's continuation is only in slot 0's answer to COUNT: slot 1, which never saw
    it, drafts it from the shared store (a fresh pool's slot 1 cannot), with AR's text."""
    from localspec.pool import open_pool
    from localspec.session import SessionOptions

    opts = SessionOptions(n_ctx=1024, n_batch=256)
    pool, fresh = open_pool(str(smollm2_path), None, opts, 2), open_pool(str(smollm2_path), None, opts, 2)
    try:
        with pool.active(0):
            first = list(pool.slots[0].generate(COUNT, greedy("sd", L=8, n=48, spec_type=("suffix",))))[-1]
        assert " 13, 14, 15" in first.text
        cfg = greedy("sd", L=8, n=32, spec_type=("suffix",))
        with pool.active(1):
            later = list(pool.slots[1].generate(LATER, cfg))[-1]
        with fresh.active(1):
            alone = list(fresh.slots[1].generate(LATER, cfg))[-1]
            ar = list(fresh.slots[1].generate(LATER, greedy("ar", n=32)))[-1]
        assert later.text == alone.text == ar.text
        assert later.stats.proposed["suffix"][1] >= alone.stats.proposed["suffix"][1] + 8
        assert later.stats.target_calls < alone.stats.target_calls
        assert pool.suffix.info()["published"] == 2 and pool.slots[0].suffix is not pool.slots[1].suffix
        pool.forget_lookups()  # what bench slots does between methods: every store empty, still shared
        assert pool.suffix.info() == {"tokens": 0, "documents": 0, "published": 0}
        assert all(s.suffix is None and s.shared_suffix is pool.suffix for s in pool.slots)
    finally:
        pool.close()
        fresh.close()


def test_forget_lookups_empties_the_store_a_bench_run_starts_from(smollm2_path):
    """bench speed calls it before every run: the next turn's store holds its own text only."""
    from tests.support.helpers import session

    s = session(smollm2_path)
    list(s.generate(COUNT, greedy("sd", L=8, n=24, spec_type=("suffix",))))
    assert s.suffix is not None and s.suffix.n_docs == 1
    s.forget_lookups()
    assert s.suffix is None
    list(s.generate(LATER, greedy("sd", L=8, n=8, spec_type=("suffix",))))
    assert s.suffix.n_docs == 1 and s.suffix.live == len(s.target.committed)  # LATER's turn alone


def test_bench_slots_rotated_wave_drafts_from_what_the_first_wave_published(smollm2_path, tmp_path):
    """`bench slots --rotate`: the second wave asks what the first wave answered; its slot
    starts a new conversation (its own store holds only the prompt), so the answer is drafted
    from the shared store, with far fewer target calls. One generation at a time: SmolLM2's
    greedy text shifts with a joined round's batch (near-ties), which a real pair's does less."""
    import json

    from localspec.cli.main import main

    out = tmp_path / "slots.json"
    assert main(["bench", "slots", "-m", str(smollm2_path), "--np", "2", "-C", "1", "--methods", "sd+suffix:16",
                 "--rotate", "-n", "24", "-c", "512", "--kinds", "code", "--json", str(out)]) == 0
    first, rotated = json.loads(out.read_text())["results"]
    assert (first["method"], rotated["method"]) == ("sd+suffix:16", "sd+suffix:16 rotated")
    assert first["tokens"] == rotated["tokens"] == 24
    assert rotated["decodes"]["target"]["calls"] * 2 < first["decodes"]["target"]["calls"]


def test_a_served_pool_reports_its_shared_store_in_health(smollm2_path):
    """`serve -np 2 --spec-type suffix`: each finished request is published; /health says so."""
    import httpx

    from localspec.config import GenConfig, SamplingConfig
    from localspec.pool import Pool
    from localspec.server.app import ServerConfig, create_app
    from localspec.server.schema import Limits
    from tests.support.helpers import session
    from tests.test_server import ServerThread

    base = session(smollm2_path, n_ctx=2048, n_seq_max=4)
    pool = Pool(base, 2)
    cfg = GenConfig(method="sd", L=8, n_predict=16, sampling=SamplingConfig(temp=0.0), spec_type=("suffix",))
    config = ServerConfig(model_id="smollm2", limits=Limits(cfg=cfg, n_ctx=1024, n_batch=256, n_seq_max=2))
    srv = ServerThread(create_app(base, config, pool))
    try:
        assert httpx.get(srv.url + "/health", timeout=10).json()["localspec"]["suffix_shared"]["published"] == 0
        for prompt in (COUNT, LATER):
            r = httpx.post(srv.url + "/v1/completions", timeout=120,
                           json={"prompt": prompt, "max_tokens": 16, "temperature": 0})
            assert r.status_code == 200, r.text
        info = httpx.get(srv.url + "/health", timeout=10).json()["localspec"]["suffix_shared"]
        assert info["published"] == 2 and info["tokens"] >= 32 and info["documents"] >= 1
    finally:
        srv.stop()
