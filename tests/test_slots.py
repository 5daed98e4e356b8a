"""Slots (backend/slots.py, localspec/pool.py): N sessions whose decodes join one llama_decode.

Two layers: the barrier and the id mapping against a pure-Python fake context (exact, no
model), then a real pool on SmolLM2: every token a slot wrote is the target's own greedy
choice for that slot's history (teacher-forced on a solo context: batch composition can
flip a near-tie, so "its own choice" is checked up to a tie margin), and the slots' decodes
really were joined (fewer llama_decode calls than the slots made).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from localspec.backend.memory import Memory
from localspec.backend.slots import Rounds, SlotContext
from localspec.errors import ConfigError

V = 8


class FakeBatch:
    def __init__(self) -> None:
        self.items: list[tuple[int, int, tuple[int, ...], bool]] = []

    def clear(self) -> FakeBatch:
        self.items = []
        return self

    def add(self, token: int, pos: int, seq_ids, logits: bool = False) -> int:
        self.items.append((token, pos, tuple(seq_ids), logits))
        return sum(1 for it in self.items if it[3]) - 1 if logits else -1

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def n_outputs(self) -> int:
        return sum(1 for it in self.items if it[3])


class FakeReal:
    """A context whose logits row for a token is one-hot at (token + pos) % V; records calls."""

    def __init__(self, n_seq_max: int = 8, n_ctx: int = 400, n_batch: int = 64) -> None:
        self.n_seq_max, self.n_ctx, self.n_batch = n_seq_max, n_ctx, n_batch
        self.memory = Memory.ATTENTION
        self.n_rs_seq = 0
        self.model = SimpleNamespace(name="fake")
        self.threads, self.n_vocab, self.on_decode = 1, V, None
        self.placement_key = "CPU"
        self.batch = FakeBatch()
        self.decodes: list[list[tuple[int, int, tuple[int, ...], bool]]] = []
        self.removed: list[tuple[int, int, int]] = []
        self.fail = False
        self._out = np.zeros((0, V), np.float32)

    def decode(self, b: FakeBatch) -> None:
        if self.fail:
            raise RuntimeError("decode failed")
        self.decodes.append(list(b.items))
        rows = [(t + p) % V for t, p, _, want in b.items if want]
        self._out = np.eye(V, dtype=np.float32)[rows] if rows else np.zeros((0, V), np.float32)

    def logits_all(self) -> np.ndarray:
        return self._out

    def try_seq_rm(self, seq: int, p0: int = 0, p1: int = -1) -> bool:
        self.removed.append((seq, p0, p1))
        return True

    def seq_rm(self, seq: int, p0: int = 0, p1: int = -1) -> None:
        assert self.try_seq_rm(seq, p0, p1)

    def seq_cp(self, src, dst, p0=0, p1=-1) -> None:
        self.removed.append((-100 - src, dst, p0))

    def pos_max(self, seq: int = 0) -> int:
        return seq


def _slots(n: int, real: FakeReal | None = None) -> tuple[FakeReal, Rounds, list[SlotContext]]:
    real = real or FakeReal()
    rounds = Rounds()
    return real, rounds, [SlotContext(real, rounds, i, n) for i in range(n)]  # type: ignore[arg-type]


def test_each_slot_owns_its_share_of_ids_positions_and_batch():
    real, _, (a, b) = _slots(2)
    assert (a.n_seq_max, a.n_ctx, a.n_batch, b.base) == (4, 200, 32, 4)
    b.seq_rm(1, 3, -1)
    b.seq_keep(2)  # never another slot's cells
    assert real.removed == [(5, 3, -1), (4, 0, -1), (5, 0, -1), (7, 0, -1)]
    assert b.pos_max(3) == 7
    with pytest.raises(ConfigError, match="out of range"):
        a.batch.add(1, 0, 4)  # slot 0 has ids 0..3 only
    with pytest.raises(ConfigError, match="share of --batch"):
        for i in range(33):
            a.batch.add(1, i, 0)


class LockCheckingReal(FakeReal):
    """Every memory call must come with the rounds' lock held by the calling thread, and
    never overlap another memory call or a decode (llama.cpp's memory is not thread-safe)."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: Rounds | None = None
        self.inside = 0
        self.overlaps = 0
        self.unlocked: list[str] = []

    def _enter(self, what: str) -> None:
        assert self.rounds is not None
        if not self.rounds._cv._is_owned():  # type: ignore[attr-defined]
            self.unlocked.append(what)
        self.inside += 1
        if self.inside > 1:
            self.overlaps += 1
        time.sleep(0.0005)  # widen the window a missing lock would leave open
        self.inside -= 1

    def decode(self, b: FakeBatch) -> None:
        self._enter("decode")
        super().decode(b)

    def try_seq_rm(self, seq: int, p0: int = 0, p1: int = -1) -> bool:
        self._enter("seq_rm")
        return super().try_seq_rm(seq, p0, p1)

    def seq_cp(self, src, dst, p0=0, p1=-1) -> None:
        self._enter("seq_cp")
        super().seq_cp(src, dst, p0, p1)

    def pos_max(self, seq: int = 0) -> int:
        self._enter("pos_max")
        return super().pos_max(seq)

    def pos_min(self, seq: int = 0) -> int:
        self._enter("pos_min")
        return 0


def test_slots_never_touch_the_shared_memory_at_once():
    """Four slots editing their caches while others decode (requests starting together,
    speculating slots rolling back): each llama.cpp memory call holds the rounds' lock, so
    none overlaps another or a round (unlocked, two slots' edits corrupted llama.cpp's
    per-sequence maps: an intermittent SIGSEGV under `serve -np 4`)."""
    real = LockCheckingReal()
    real.n_seq_max = 8
    real, rounds, scs = _slots(4, real)
    real.rounds = rounds
    go = threading.Barrier(4)

    def run(sc: SlotContext) -> None:
        with rounds.active(sc.index):
            go.wait()
            for i in range(15):
                sc.seq_rm(0, i, -1)
                sc.seq_cp(0, 1)
                sc.pos_max(0)
                sc.pos_min(1)
                sc.seq_keep(0)
                sc.batch.clear().add_sequence([1, 2], i, 0)
                sc.decode()
            sc.clear()

    threads = [threading.Thread(target=run, args=(sc,)) for sc in scs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not real.unlocked and real.overlaps == 0
    assert len(real.removed) > 4 * 15 * 2


def test_a_round_fires_when_every_active_slot_waits_and_rows_are_each_slot_s_own():
    real, rounds, slots = _slots(3, FakeReal(n_seq_max=12))
    got: dict[int, int] = {}
    start = threading.Barrier(3)

    def run(i: int) -> None:
        sc = slots[i]
        with rounds.active(i):
            start.wait()
            sc.batch.clear().add_sequence([i, i + 1], 10 * i, [0, 1], logits_last=True)
            sc.decode()
            got[i] = int(sc.logits_all().argmax(axis=1)[0])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(real.decodes) == 1 and rounds.rounds == 1  # three slots, ONE decode
    ids = sorted({s for _, _, seqs, _ in real.decodes[0] for s in seqs})
    assert ids == [0, 1, 4, 5, 8, 9]  # each slot's local ids 0 and 1, mapped into its range
    assert got == {i: (i + 1 + 10 * i + 1) % V for i in range(3)}  # the row of its own last token


def test_a_slot_that_leaves_lets_the_others_round_run():
    real, rounds, (a, b) = _slots(2)
    done = threading.Event()
    inside = threading.Event()

    def waiter() -> None:
        with rounds.active(0):
            inside.set()
            a.batch.clear().add(3, 0, 0, True)
            a.decode()
        done.set()

    with rounds.active(1):
        t = threading.Thread(target=waiter)
        t.start()
        inside.wait(5)
        assert not done.wait(0.2)  # slot 1 is active and not waiting: no round yet
    t.join(5)
    assert done.is_set() and len(real.decodes) == 1


def test_a_failed_decode_reaches_every_slot_of_its_round():
    real, rounds, slots = _slots(2, FakeReal())
    real.fail = True
    errors: list[BaseException] = []
    go = threading.Barrier(2)

    def run(i: int) -> None:
        with rounds.active(i):
            go.wait()
            slots[i].batch.clear().add(1, 0, 0, True)
            try:
                slots[i].decode()
            except RuntimeError as e:
                errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(errors) == 2


def test_a_context_with_fewer_sequences_than_slots_is_refused_with_one_line():
    real = FakeReal(n_seq_max=2)
    real.memory = Memory.HYBRID
    SlotContext(real, Rounds(), 0, 2)  # type: ignore[arg-type] - one sequence each: fine
    with pytest.raises(ConfigError, match="-np 3: fake's context holds 2 sequences, fewer than one per slot"):
        SlotContext(real, Rounds(), 0, 3)  # type: ignore[arg-type]


# --- a real pool -------------------------------------------------------------------------------

PROMPTS = ["Write a haiku about rain.", "List three prime numbers.", "What is Python?"]
# logits: what batch composition alone changes. Measured on SmolLM2 Q8_0, 40 tokens: a SOLO
# session's own AR tokens sit up to 0.18 below the teacher-forced argmax, the pool's up to
# 0.06; a slot reading another's rows or cells would be off by whole logits.
TIE = 0.3


@pytest.mark.parametrize("method", ["ar", "sd"])
def test_pool_slots_write_the_targets_own_tokens_in_joined_decodes(smollm2_q8_path, smollm2_q4_0_path, method):
    from localspec.backend import Context, Model
    from localspec.config import GenConfig, SamplingConfig
    from localspec.pool import open_pool
    from localspec.session import SessionOptions

    cfg = GenConfig(method=method, n_predict=24, L=4, sampling=SamplingConfig(temp=0.0))
    pool = open_pool(str(smollm2_q8_path), str(smollm2_q4_0_path),
                     SessionOptions(n_ctx=3072, n_batch=384, n_seq_max=8), len(PROMPTS))
    out: dict[int, tuple[list[int], list[int]]] = {}
    go = threading.Barrier(len(PROMPTS))

    def run(i: int) -> None:
        go.wait()
        with pool.active(i):
            s = pool.slots[i]
            list(s.generate([{"role": "user", "content": PROMPTS[i]}], cfg))
            out[i] = (s.last_prompt_tokens, s.last_tokens)

    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        made = sum(s.target.ctx.n_decodes + (s.draft.ctx.n_decodes if s.draft else 0) for s in pool.slots)
        assert pool.rounds.decodes < made  # joined: fewer llama_decode calls than the slots asked for
        assert pool.rounds.n_active == 0
    finally:
        pool.close()
    solo = Context(Model(str(smollm2_q8_path)), n_ctx=1024, n_batch=256, n_seq_max=1)
    try:
        for i in range(len(PROMPTS)):
            prompt, gen = out[i]
            assert len(gen) > 4
            b = solo.batch.clear()
            rows = [b.add(t, j, 0, j >= len(prompt) - 1) for j, t in enumerate(prompt + gen[:-1])]
            solo.decode()
            logits = solo.logits_all()
            for k, tok in enumerate(gen):
                row = logits[rows[len(prompt) - 1 + k]]
                assert row[tok] >= row.max() - TIE, (i, k, tok, int(row.argmax()))
            solo.clear()
    finally:
        solo.close()


# --- pricing a slot's block inside a shared round ---------------------------------------------


def test_in_round_prices_what_a_slot_adds_and_auto_sees_it():
    """A CPU-like curve (memory-bound to ~8 tokens, then compute-bound): alone, a good draft
    pays; sharing a round with other slots, every token a slot adds costs the round's
    marginal one, so AR (which adds 1) wins and auto must pick it -- and no lookup pays
    either, even where the curve is flat (measured on the 2-core machine: costmodel/inround.py)."""
    from dataclasses import replace

    from localspec.config import GenConfig, SamplingConfig
    from localspec.costmodel import CostModel
    from localspec.costmodel.acceptance import Acceptance
    from localspec.costmodel.curves import CostCurve
    from localspec.costmodel.inround import InRound

    sizes = [1, 2, 4, 8, 16, 32, 64, 128]
    target = CostCurve(sizes, [0.050 + 0.002 * min(n, 8) + 0.006 * max(0, n - 8) for n in sizes])
    draft = CostCurve(sizes, [0.004 * n for n in sizes])
    cm = CostModel(target, draft, acceptance=Acceptance(prior=0.7))
    cfg = GenConfig(method="auto", auto_L=True, sampling=SamplingConfig(temp=0.0))
    alone, _ = cm.choose(cfg)
    others = {"n": 48.0}
    shared = replace(cm, target=InRound(target, lambda: others["n"]), draft=draft)
    assert shared.target(1) == pytest.approx(target(49) - target(48))
    in_round, _ = shared.choose(cfg)
    assert alone is not None and in_round is None
    from localspec.costmodel.lookup import LookupGate

    gate = LookupGate(accepted={"k": 95.0}, trials={"k": 100.0})
    assert gate.best_length(target, "k", 16)[0] > 0  # alone, a 95 %-right lookup pays
    others["n"] = 3.0  # three plain steps, in the flat stretch of the curve
    assert shared.target(5) == pytest.approx(5 * shared.target(1))
    assert shared.choose(cfg)[0] is None and gate.best_length(shared.target, "k", 16) == (0, 1.0)
    assert "other slots share" in shared.why_ar()  # the note says why, not "does not pay on this machine"
    others["n"] = 0.0  # the others left: the curve is the lone one again
    assert shared.choose(cfg)[0] == alone
    shared.target.dirty = True  # healing and saving act on the one shared curve
    assert target.dirty


def test_rounds_learn_what_the_other_slots_add():
    real, rounds, (a, b) = _slots(2)
    go = threading.Barrier(2)

    def run(sc: SlotContext, n: int) -> None:
        with rounds.active(sc.index):
            go.wait()
            for _ in range(6):
                sc.batch.clear().add_sequence(list(range(n)), 0, 0)
                sc.decode()
            go.wait()  # both still active when asked
            seen[sc.index] = rounds.others(sc.index, real)
            go.wait()

    seen: dict[int, float] = {}
    threads = [threading.Thread(target=run, args=(a, 3)), threading.Thread(target=run, args=(b, 10))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen[0] == pytest.approx(10, rel=0.15) and seen[1] == pytest.approx(3, rel=0.15)
    assert rounds.others(0, real) == 0.0  # nobody else active now


def test_in_round_never_prices_a_token_at_zero():
    """A measured curve is flat in places (timed minima, made monotone): the marginal there
    is 0, which would make AR's predicted rate infinite (a ZeroDivisionError in auto)."""
    from localspec.costmodel.curves import CostCurve
    from localspec.costmodel.inround import FLOOR, InRound

    flat = CostCurve([1, 8, 16, 64], [0.010, 0.020, 0.020, 0.050])
    seen = InRound(flat, lambda: 9.0)
    assert seen(1) == pytest.approx(FLOOR * flat(1)) and seen(1) > 0
    assert seen(8) == pytest.approx(8 * seen(1))  # sharing a round: every token at the marginal


def test_slots_saving_one_estimate_at_once_do_not_collide(tmp_path):
    from localspec.costmodel.acceptance import Acceptance

    path = tmp_path / "accept.json"
    errors: list[BaseException] = []

    def save() -> None:
        try:
            for _ in range(50):
                Acceptance(prior=0.5).save(path)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=save) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert errors == [] and path.is_file()


def test_draft_rounds_go_first_and_the_target_round_takes_every_slot():
    """Slot 0 waits to verify while slot 1 still drafts two steps: the draft rounds run
    alone (cheap), then ONE target round verifies both (no target pass per draft step)."""
    real_t, real_d = FakeReal(), FakeReal()
    rounds = Rounds()
    t = [SlotContext(real_t, rounds, i, 2) for i in range(2)]  # type: ignore[arg-type]
    d = [SlotContext(real_d, rounds, i, 2, priority=1) for i in range(2)]  # type: ignore[arg-type]
    go = threading.Barrier(2)

    def verifier() -> None:
        with rounds.active(0):
            go.wait()
            t[0].batch.clear().add(5, 0, 0, True)
            t[0].decode()

    def drafter() -> None:
        with rounds.active(1):
            go.wait()
            for step in range(2):
                d[1].batch.clear().add(7, step, 0, True)
                d[1].decode()
            t[1].batch.clear().add(6, 0, 0, True)
            t[1].decode()

    threads = [threading.Thread(target=verifier), threading.Thread(target=drafter)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert len(real_d.decodes) == 2 and len(real_t.decodes) == 1
    assert sorted(s for _, _, seqs, _ in real_t.decodes[0] for s in seqs) == [0, 4]  # both slots' tokens


def test_a_slot_never_times_inside_a_round(smollm2_q8_path, smollm2_q4_0_path, tmp_path, monkeypatch):
    """With no cost model timed at start-up, auto in a slot decodes plainly and says why: a
    timing decode in a round would time the other slots' tokens too."""
    from localspec.config import GenConfig, SamplingConfig
    from localspec.pool import open_pool
    from localspec.session import SessionOptions

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))  # nothing cached: a turn would time
    pool = open_pool(str(smollm2_q8_path), str(smollm2_q4_0_path), SessionOptions(n_ctx=1024, n_batch=256), 2)
    try:
        with pool.active(0):
            done = list(pool.slots[0].generate("1, 2, 3,", GenConfig(n_predict=4, sampling=SamplingConfig(temp=0.0))))[-1]
        assert done.stats.ran == "ar" and "-np" in done.stats.choice_note
        assert not list((tmp_path / "costs").glob("*.json"))  # nothing was timed, so nothing cached
        # timed at start-up (what `serve -np` does before serving) and handed over: the slots'
        # turns now decide from it (the refusal above must not outlive it)
        cfg = GenConfig(method="auto", auto_L=True, n_predict=8, sampling=SamplingConfig(temp=0.0))
        pool.base.explain(cfg)
        pool.share_costs()
        assert pool.slots[1].costs is not None
        with pool.active(1):
            done = list(pool.slots[1].generate("1, 2, 3,", cfg))[-1]
        assert "-np" not in done.stats.choice_note and "could not time" not in done.stats.choice_note
        assert done.stats.predicted  # auto priced its options with the handed-over model
    finally:
        pool.close()


def test_bench_slots_runs_each_method_on_a_pool(smollm2_q8_path, smollm2_q4_0_path, tmp_path, capsys):
    """`localspec bench slots`: C generations at once per method, counted from the real
    contexts (the slots' decodes were joined: fewer target calls than tokens); a
    --concurrent beyond --np is a one-line refusal (exit 2)."""
    import json

    from localspec.cli.main import main

    out = tmp_path / "slots.json"
    args = ["bench", "slots", "-m", str(smollm2_q8_path), "-md", str(smollm2_q4_0_path), "--np", "2",
            "--methods", "ar", "sd:2", "-n", "8", "-c", "512", "--kinds", "code", "--json", str(out)]
    assert main(args) == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["method"] for r in rows] == ["ar", "sd:2"]
    for r in rows:
        assert r["tokens"] == 16 and r["aggregate_tok_per_s"] > 0
        assert 0 < r["decodes"]["target"]["calls"] < r["tokens"] + 4  # two slots' steps shared calls
    assert rows[0]["ran"] == ["ar", "ar"] and "draft" in rows[1]["decodes"]
    assert "bench slots: 2 generations at once on 2 slots" in capsys.readouterr().out
    capsys.readouterr()
    assert main(["bench", "slots", "-m", str(smollm2_q8_path), "--np", "2", "--concurrent", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--concurrent must be in 1..--np (2)" in err[0]
    assert main(["bench", "slots", "-m", "missing.gguf", "--methods", "sd+nope:4"]) == 2  # before any load
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--spec-type" in err[0]


def test_only_a_lone_slot_s_rounds_heal_the_shared_curve():
    """A round of several slots is several sequences and costs more than one sequence's
    batch of its size: it must not heal the curve a lone request (and the on-disk cache) is
    priced by. A round with one slot in it does."""

    class Timed(FakeReal):
        def decode(self, b: FakeBatch) -> None:
            super().decode(b)
            if self.on_decode is not None:
                self.on_decode(b.n, 0.01)

    real, rounds, (a, b) = _slots(2, Timed())
    healed: list[int] = []
    real.on_decode = lambda n, s: healed.append(n)
    go = threading.Barrier(2)

    def run(sc: SlotContext) -> None:
        with rounds.active(sc.index):
            go.wait()
            sc.batch.clear().add_sequence([1, 2, 3], 0, 0)
            sc.decode()  # both slots: one joined round
            go.wait()

    threads = [threading.Thread(target=run, args=(sc,)) for sc in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(real.decodes) == 1 and healed == []
    with rounds.active(0):
        a.batch.clear().add_sequence([4, 5], 3, 0)
        a.decode()  # alone
    assert healed == [2] and real.on_decode is not None
