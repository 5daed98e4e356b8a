"""A loopback TCP proxy that adds a chosen round-trip time (for RPC benchmarks).

Why: on one machine an RPC server costs only loopback round trips (~20 us), which hides
what a LAN (~0.3-1 ms) or Wi-Fi (~3-10 ms) does to a target whose layers are remote. Each
direction's bytes are held for rtt/2 and then sent in order, so latency is added without
limiting bandwidth (as a fast network with a long path would). Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import queue
import socket
import threading
import time


class DelayProxy:
    """127.0.0.1:<port> -> `target` ('host:port'), rtt_ms added per round trip."""

    def __init__(self, target: str, rtt_ms: float) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.delay = max(0.0, rtt_ms) / 2000.0
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.bind(("127.0.0.1", 0))
        self._srv.listen(4)
        self.endpoint = f"127.0.0.1:{self._srv.getsockname()[1]}"
        self._closed = False
        self._socks: list[socket.socket] = []
        self.round_trips = 0  # server answers that followed a client request (turnarounds)
        self._last_from_client = False
        threading.Thread(target=self._accept, daemon=True, name="delay-proxy").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                a, _ = self._srv.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(self.target)
            except OSError:
                a.close()
                continue
            for s in (a, b):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._socks.append(s)
            for src, dst in ((a, b), (b, a)):
                q: queue.Queue = queue.Queue()
                threading.Thread(target=self._read, args=(src, q, src is a), daemon=True).start()
                threading.Thread(target=self._write, args=(dst, q), daemon=True).start()

    def _read(self, src: socket.socket, q: queue.Queue, from_client: bool) -> None:
        while True:
            try:
                data = src.recv(1 << 20)
            except OSError:
                data = b""
            if data and from_client != self._last_from_client:
                self._last_from_client = from_client
                self.round_trips += not from_client
            q.put((time.perf_counter() + self.delay, data))
            if not data:
                return

    def _write(self, dst: socket.socket, q: queue.Queue) -> None:
        while True:
            due, data = q.get()
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._closed = True
        for s in [self._srv, *self._socks]:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
