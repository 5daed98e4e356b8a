"""server/fim_prefetch.py: which request an editor sends next when the user types the
suggestion's first word (the prompt the worker evaluates while the slot is idle)."""

from __future__ import annotations

import asyncio
import threading
import time

from localspec.config import GenConfig
from localspec.events import Done, Stats, Written
from localspec.server.fim_prefetch import next_request
from localspec.server.schema import GenRequest
from localspec.server.worker import Job, Worker
from localspec.session import FimInput

OLD = FimInput("def f(x):\n    ", "\n\ndef g():\n    pass\n")


def test_the_first_word_and_its_space_are_typed_into_the_prefix() -> None:
    got = next_request(OLD, "return x + 1\n")
    assert got == FimInput(OLD.prefix + "return ", OLD.suffix)


def test_leading_whitespace_and_a_line_end_are_typed_with_the_word() -> None:
    got = next_request(OLD, "\n    y = x\n    return y\n")
    assert got is not None and got.prefix == OLD.prefix + "\n    y "


def test_nothing_is_guessed_when_the_answer_is_one_word_or_empty() -> None:
    assert next_request(OLD, "pass\n") is None  # typing it all: the hole is filled
    assert next_request(OLD, "") is None
    assert next_request(OLD, "   \n") is None


def test_a_cursor_line_sent_as_prompt_grows_there_but_never_across_a_line() -> None:
    vim = FimInput("def f(x):\n", OLD.suffix, (), "    ")  # llama.vim: the cursor's line is `prompt`
    assert next_request(vim, "return x + 1\n") == FimInput("def f(x):\n", OLD.suffix, (), "    return ")
    assert next_request(vim, "x = 1\n    return x\n") == FimInput("def f(x):\n", OLD.suffix, (), "    x ")
    assert next_request(vim, "pass\n    return x\n") is None  # the next line: the editor moves it to the prefix


# --- the worker: when a slot guesses, and what stops it (a fake session: no model) -------------


class Guessing:
    """Answers ANSWER to anything; a prefetch counts 10 ms steps until stopped (or `steps`)."""

    def __init__(self, answer: str = "return x + 1\n", steps: int = 500) -> None:
        self.answer, self.steps = answer, steps
        self.guesses: list[list[int]] = []
        self.evaluated: list[int] = []
        self.started = threading.Event()

    def fim_prompt(self, fim: FimInput, n_predict: int) -> list[int]:
        return [ord(c) for c in fim.prefix + "|" + fim.suffix]

    def generate(self, tokens, cfg):
        self.served = getattr(self, "served", 0) + 1
        yield Written((1,), self.answer, "target")
        yield Done("eog", self.answer, Stats(method="ar"))

    def prefetch(self, tokens, stop) -> int:
        self.guesses.append(tokens)
        self.started.set()
        n = 0
        while n < self.steps and not stop.is_set():
            time.sleep(0.01)
            n += 1
        self.evaluated.append(n)
        return n

    def stop(self) -> None:
        pass


def _job(fim: FimInput | None, loop) -> Job:
    return Job(GenRequest("infill" if fim else "completion", "k", GenConfig(method="ar", n_predict=8), fim=fim), loop)


def _until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert cond()


def test_an_idle_slot_evaluates_the_guess_and_the_next_request_stops_it() -> None:
    loop = asyncio.new_event_loop()
    sess = Guessing()
    w = Worker(sess, max_queue=4)  # type: ignore[arg-type]
    w.start()
    try:
        w.submit(_job(OLD, loop))
        assert sess.started.wait(5)
        assert sess.guesses[0] == sess.fim_prompt(FimInput(OLD.prefix + "return ", OLD.suffix), 8)
        assert w.slots()[0]["prefetching"]
        t0 = time.monotonic()
        w.submit(_job(None, loop))  # any request: stopped within a step, not after 5 s
        _until(lambda: len(sess.evaluated) == 1)
        assert time.monotonic() - t0 < 2.0 and sess.evaluated[0] < sess.steps
        _until(lambda: not w.slots()[0]["prefetching"])
        assert len(sess.guesses) == 1  # a request that is not FIM brings no guess
        assert w.slots()[0]["n_prefetched"] == sess.evaluated[0]
    finally:
        w.close(5)
        loop.close()


def test_no_guess_when_turned_off_or_nothing_is_left_to_type() -> None:
    loop = asyncio.new_event_loop()
    for sess, on in ((Guessing(), False), (Guessing(answer="pass\n"), True)):
        w = Worker(sess, max_queue=4, prefetch=on)  # type: ignore[arg-type]
        w.start()
        try:
            job = _job(OLD, loop)
            w.submit(job)
            _until(lambda job=job: job.finished)
            time.sleep(0.1)
            assert sess.guesses == [] and not w.slots()[0]["prefetching"]
        finally:
            w.close(5)
    loop.close()


class TwoSlots:
    """What the worker needs of a localspec.pool.Pool."""

    def __init__(self) -> None:
        self.slots = [Guessing(), Guessing()]

    def active(self, slot: int):
        import contextlib

        return contextlib.nullcontext()


def test_with_slots_the_guessing_slot_takes_its_clients_next_request() -> None:
    """A slot that guesses is idle: the dispatcher gives it the request whose prompt it holds
    (slot similarity); being the request it guessed, the evaluation goes on to its end (it is
    that request's own prompt) and the request is served after it, on that slot."""
    loop = asyncio.new_event_loop()
    pool = TwoSlots()
    for s in pool.slots:
        s.steps = 30
    w = Worker(pool.slots[0], max_queue=4, pool=pool)  # type: ignore[arg-type]
    w.start()
    try:
        w.submit(_job(OLD, loop))
        _until(lambda: any(s.started.is_set() for s in pool.slots))
        guessing = next(i for i, s in enumerate(pool.slots) if s.started.is_set())
        w.submit(_job(FimInput(OLD.prefix + "return ", OLD.suffix), loop))
        _until(lambda: getattr(pool.slots[guessing], "served", 0) == 2)
        assert pool.slots[guessing].evaluated[0] == 30  # not stopped
        assert getattr(pool.slots[1 - guessing], "served", 0) == 0
    finally:
        w.close(5)
        loop.close()


def test_the_guessed_request_lets_the_guess_finish_another_stops_it() -> None:
    loop = asyncio.new_event_loop()
    sess = Guessing(steps=30)
    w = Worker(sess, max_queue=4)  # type: ignore[arg-type]
    w.start()
    try:
        w.submit(_job(OLD, loop))
        assert sess.started.wait(5)
        w.submit(_job(FimInput(OLD.prefix + "return ", OLD.suffix), loop))  # what was guessed
        _until(lambda: getattr(sess, "served", 0) == 2)
        assert sess.evaluated[0] == 30
        _until(lambda: len(sess.guesses) == 2)  # its answer brings the next guess...
        w.submit(_job(FimInput(OLD.prefix + "yield ", OLD.suffix), loop))  # ...which this stops
        _until(lambda: len(sess.evaluated) == 2)
        assert sess.evaluated[1] < 30
    finally:
        w.close(5)
        loop.close()
