"""Answers on the server's port while the models load and the cost model is timed at start-up.

Why: the port is bound before the models load (a port in use fails at once, not after a
minute of loading), and `serve -np N` times its cost model before the slots serve. Until
uvicorn takes the socket, a client connecting would hang without a word. llama-server
answers 503 "Loading model" then. So does this: a small thread accepts on the bound socket
and answers every request with llama-server's 503 JSON, plus how far the start-up is
(`localspec.loading`: the step and its fraction). When `stop()` returns, the socket is
still listening and uvicorn serves it; a connection arriving in between waits in the
backlog for uvicorn.
"""

from __future__ import annotations

import json
import select
import socket
import threading

BACKLOG = 64
READ_LIMIT = 65536  # what is read of a request: its head, enough to answer it


class Loading:
    """The 503 responder (see the module docstring); `set` reports progress, `stop` ends it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.step = "starting"
        self.fraction = 0.0
        self.answered = 0  # requests answered while loading (tests, the log)
        self._stop = threading.Event()
        sock.listen(BACKLOG)
        self._thread = threading.Thread(target=self._run, name="localspec-loading", daemon=True)
        self._thread.start()

    def set(self, step: str, fraction: float) -> None:
        self.step, self.fraction = step, max(0.0, min(1.0, fraction))

    def stop(self) -> None:
        """Stop answering (idempotent); the socket stays open and listening."""
        self._stop.set()
        self._thread.join(timeout=5)

    def body(self) -> bytes:
        return json.dumps({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"},
                           "status": "loading",
                           "localspec": {"loading": {"step": self.step, "fraction": round(self.fraction, 3)}}}).encode()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self.sock], [], [], 0.1)
            except (OSError, ValueError):  # the socket was closed under us: start-up failed
                return
            if not ready or self._stop.is_set():
                continue
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(2.0)
            data = b""
            while b"\r\n\r\n" not in data and len(data) < READ_LIMIT:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            body = self.body()
            head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n").encode()
            conn.sendall(head + body)
            self.answered += 1
        except OSError:  # a client that went away: nothing to answer
            pass
