"""ggml's RPC server, started from this install: lend this machine's devices to a client.

`ggml_backend_rpc_start_server` comes from the RPC backend's proc-address table (as in
llama.cpp's tools/rpc/rpc-server.cpp, which pip does not build). It never returns while
it serves, and reports a bad host, a taken port or an unknown device only as a line on
stderr and a silent return, so everything it would trip on is checked here first.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import sys
import threading
from pathlib import Path

from localspec.backend.rpc import (
    DeviceInfo,
    RpcError,
    device_info,
    libggml,
    require_rpc,
    rpc_function,
)

_vp, _cp, _sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
_START_SERVER = ctypes.CFUNCTYPE(None, _cp, _cp, _sz, _sz, ctypes.POINTER(_vp))
_GPU_TYPES = (1, 3)  # GGML_BACKEND_DEVICE_TYPE_GPU, _IGPU (CPU = 0, ACCEL = 2)


def local_devices() -> list[DeviceInfo]:
    """The devices this machine's llama.cpp offers (what a server may serve)."""
    out = []
    for i in range(libggml.ggml_backend_dev_count()):
        dev = libggml.ggml_backend_dev_get(i)
        name = libggml.ggml_backend_dev_name(dev).decode()
        if not name.startswith("RPC"):
            out.append(device_info(dev))
    return out


def default_server_devices() -> list[str]:
    """As llama.cpp's rpc-server: every GPU, else the CPU."""
    gpus = []
    for i in range(libggml.ggml_backend_dev_count()):
        dev = libggml.ggml_backend_dev_get(i)
        name = libggml.ggml_backend_dev_name(dev).decode()
        if libggml.ggml_backend_dev_type(dev) in _GPU_TYPES and not name.startswith("RPC"):
            gpus.append(name)
    return gpus or ["CPU"]


class RpcServer:
    """ggml's RPC server on a background thread (its accept loop never returns)."""

    def __init__(self, host: str, port: int, devices: list[str] | None = None,
                 threads: int | None = None, cache_dir: str | Path | None = None) -> None:
        require_rpc()
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise RpcError(f"--host {host!r}: give an IPv4 address (127.0.0.1, or 0.0.0.0 for every interface)") from None
        if not 0 < port < 65536:
            raise RpcError(f"--port {port}: must be 1..65535")
        if threads is not None and threads < 1:
            raise RpcError(f"--threads {threads}: must be at least 1")
        _check_port_free(host, port)
        names = devices or default_server_devices()
        ptrs = []
        for name in names:
            dev = libggml.ggml_backend_dev_by_name(name.encode())
            if not dev or name.upper().startswith("RPC"):
                have = ", ".join(d.name for d in local_devices())
                raise RpcError(f"--device {name}: no such device here (available: {have})")
            ptrs.append(dev)
        self.cache_dir = None
        if cache_dir is not None:
            self.cache_dir = Path(cache_dir).expanduser()
            try:
                self.cache_dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise RpcError(f"--cache {cache_dir}: cannot create it ({e.strerror})") from None
        self.endpoint = f"{host}:{port}"
        self.threads = threads or max(1, (os.cpu_count() or 2) // 2)
        self.devices = [device_info(d) for d in ptrs]
        self._ptrs = (_vp * len(ptrs))(*ptrs)
        self._thread: threading.Thread | None = None

    @property
    def exposed(self) -> bool:
        """True when reachable from other machines (no auth, no encryption: warn)."""
        return not ipaddress.IPv4Address(self.endpoint.rsplit(":", 1)[0]).is_loopback

    def start(self) -> None:
        start = rpc_function("ggml_backend_rpc_start_server", _START_SERVER)
        cache = str(self.cache_dir).encode() if self.cache_dir else None
        args = (self.endpoint.encode(), cache, self.threads, len(self._ptrs), self._ptrs)
        self._thread = threading.Thread(target=start, args=args, name="ggml-rpc-server", daemon=True)
        self._thread.start()

    def alive(self, wait: float = 0.0) -> bool:
        """Whether ggml's server loop still runs (it returns only when it failed)."""
        if self._thread is None:
            return False
        self._thread.join(wait)
        return self._thread.is_alive()


def _check_port_free(host: str, port: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ggml binds
        s.bind((host, port))
    except OSError as e:
        raise RpcError(f"cannot listen on {host}:{port}: {e.strerror} (another server there? pick --port)") from None
    finally:
        s.close()


def flush_c_stdio() -> None:
    """Flush C's stdout (ggml's server prints with printf), e.g. before os._exit."""
    try:
        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001
        pass
    sys.stdout.flush()
