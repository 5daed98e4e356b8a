"""DecodeGate: a session's generations and its cost-model timing steps, never at once.

llama.cpp contexts are not thread-safe, and a timing decode beside a generation would also
distort the live timings the curves heal from; so a background timer (session.py) takes
the gate for one step at a time, only when no generation holds it, and a generation that
starts during a step waits for that step alone. The timer waits for a quiet moment (no
generation for QUIET seconds) so that a server's queued requests and a chat's next turn
go first; a timer that waited STARVED seconds for one takes a step at each generation's
end until one comes, so that a server that is never idle gets its cost model too.
"""

from __future__ import annotations

import threading
import time

QUIET = 0.25  # seconds without a generation before the timer takes its next step
# seconds the timer may wait for a quiet moment; then each next generation waits for one
# step until one comes (a server that is never idle still gets its cost model, a step per
# request: 44 requests for the default pair, 11 sizes x 2 repeats x 2 models)
STARVED = 30.0


class DecodeGate:
    """Generations and timing steps, never at once: any number of generations (counted, a
    thinking budget's phases overlap) or one timing step."""

    def __init__(self, quiet: float | None = None, starved: float | None = None) -> None:
        self.quiet = QUIET if quiet is None else quiet  # read now: tests set the module's
        self.starved = STARVED if starved is None else starved
        self._cond = threading.Condition()
        self._users = 0
        self._waiting = 0  # generations waiting for a step to end: the timer lets them go first
        self._stepping = False
        self._wants = False  # a starved timer: the next generation lets it step first
        self._starving = False  # ... and the ones after, until a quiet moment comes
        self._idle_since = time.monotonic()

    def enter(self) -> float:
        """A generation starts: wait for the step in flight; the seconds waited."""
        t0 = time.monotonic()
        waited = False
        with self._cond:
            self._waiting += 1
            while self._stepping or (self._wants and self._users == 0):
                waited = True
                self._cond.wait()
            self._waiting -= 1
            self._users += 1
        return time.monotonic() - t0 if waited else 0.0

    @property
    def waiting(self) -> int:
        """Generations waiting for the step in flight (tests wait for one to be there)."""
        return self._waiting

    def leave(self) -> None:
        with self._cond:
            self._users -= 1
            self._idle_since = time.monotonic()
            self._cond.notify_all()

    def claim(self, closing: threading.Event) -> bool:
        """The timer: wait for a quiet moment (no generation for `quiet` seconds; once it
        waited `starved` seconds for one, the end of each running generation until a quiet
        moment comes), then hold the gate for one step (release() ends it). False once
        `closing` is set."""
        since = time.monotonic()
        with self._cond:
            while not closing.is_set():
                now = time.monotonic()
                if self._starving or now - since >= self.starved:
                    self._starving = self._wants = True
                if self._users == 0 and (self._waiting == 0 or self._wants):
                    rest = self.quiet - (now - self._idle_since)
                    if rest <= 0 or self._wants:
                        self._starving = self._starving and rest > 0  # quiet again: no more pushing
                        self._stepping, self._wants = True, False
                        return True
                    self._cond.wait(rest)
                else:
                    self._cond.wait(None if self._wants else max(0.01, self.starved - (now - since)))
            self._wants = False
            self._cond.notify_all()
            return False

    def release(self) -> None:
        with self._cond:
            self._stepping = False
            self._cond.notify_all()

    def wake(self) -> None:
        """Let a waiting timer see that it is closing."""
        with self._cond:
            self._cond.notify_all()


class Ticket:
    """One generation's hold on the gate, released once: at the generation's end, or when
    its never-started iterator is collected (RuntimeSession registers both)."""

    def __init__(self, gate: DecodeGate, waited: float) -> None:
        self.gate = gate
        self.waited = waited
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self.gate.leave()
