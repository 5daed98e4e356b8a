"""llama.cpp's RPC backend (ggml-rpc) through ctypes, client side: register remote servers.

llama-cpp-python has no binding for this (its old `rpc_servers` argument is gone), so this
does what llama.cpp's `--rpc` does in common/arg.cpp: look the "RPC" backend up, fetch
`ggml_backend_rpc_add_server` from its proc-address table, register the backend it returns.
Its devices then appear as RPC0, RPC1, ... (numbered in registration order, process-wide)
and can be named in `LoadOptions.devices` like a GPU. The server side is
localspec.backend.rpc_server (same table; client and server must come from the same
llama.cpp: the handshake checks the protocol version).

ggml treats every network failure as fatal: a refused connection, a failed handshake or a
server that dies mid-generation all end in GGML_ABORT (SIGABRT, a core dump). So each
endpoint is first checked from Python (TCP connect plus the protocol's own HELLO, with a
timeout) and a LocalspecError names it; and once servers are registered an abort callback
turns a later lost connection into one clear line and exit code RPC_LOST_EXIT instead of a
core dump (the process cannot survive it: ggml gives no way back from its abort).
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass

import llama_cpp

from localspec.backend import ggml
from localspec.errors import LocalspecError

DEFAULT_PORT = 50052
PROTO_MAJOR, PROTO_MINOR = 7, 0  # RPC_PROTO_*_VERSION of the vendored ggml-rpc.h
RPC_LOST_EXIT = 3  # exit code when a registered server goes away mid-run (not bad input: not 2)
_CMD_HELLO = 14  # RPC_CMD_HELLO ("must be always 14" in ggml-rpc.cpp)
_CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE: all zero = plain TCP (no RDMA upgrade)

_vp, _cp, _sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
libggml = ggml.lib()

_ADD_SERVER = ctypes.CFUNCTYPE(_vp, _cp)
_ABORT_CB = ctypes.CFUNCTYPE(None, _cp)
# leave the alternate screen, show the cursor, stop mouse reports and bracketed paste
_TERMINAL_RESET = "\x1b[?1049l\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\n"


class RpcError(LocalspecError):
    """An RPC endpoint that is malformed, unreachable, busy or of another llama.cpp version."""


@dataclass(frozen=True)
class DeviceInfo:
    """One ggml device as the RPC code sees it (remote ones: description = endpoint)."""

    name: str
    description: str
    free: int
    total: int


_registered: dict[str, list[DeviceInfo]] = {}  # "ip:port" -> its devices, in registration order
_lock = threading.Lock()


# ---------------------------------------------------------------------------- checks
def supported() -> bool:
    """True when this llama-cpp-python was built with -DGGML_RPC=on."""
    return bool(llama_cpp.llama_supports_rpc())


def require_rpc() -> None:
    """Fail with the rebuild command unless the RPC backend is built in."""
    if not supported():
        raise RpcError(
            "this llama-cpp-python was built without RPC support; rebuild it with "
            f'CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir '
            f"llama-cpp-python=={llama_cpp.__version__}"
        )


def split_endpoint(text: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); ValueError with the reason for anything else."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 192.168.1.20:{DEFAULT_PORT})")
    return host.strip("[]"), int(port)


def _ipv4(host: str, what: str) -> str:
    """The IPv4 address of a host (ggml's RPC transport is IPv4 only)."""
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise RpcError(f"RPC server {what}: cannot resolve {host!r} to an IPv4 address ({e.strerror}; the RPC transport is IPv4 only)") from None
    return str(infos[0][4][0])


def resolve(endpoint: str) -> str:
    """'HOST:PORT' -> 'ip:port', the form ggml is given (one name per server, so that
    'localhost:1' and '127.0.0.1:1' are not registered as two servers)."""
    try:
        host, port = split_endpoint(endpoint)
    except ValueError as e:
        raise RpcError(f"--rpc: {e}") from None
    return f"{_ipv4(host, endpoint)}:{port}"


def probe(endpoint: str, timeout: float = 5.0) -> str:
    """Check that an RPC server of our protocol answers at `endpoint`; return 'ip:port'.

    A TCP connect plus the protocol's HELLO, each bounded by `timeout`, so that every way
    ggml would abort (refused, unreachable, version mismatch) or hang (a server already
    serving another client: it serves one at a time) becomes an RpcError naming the
    endpoint. The server sees a client that says hello and leaves, which it shrugs off.
    """
    addr = resolve(endpoint)
    ip, port = addr.rsplit(":", 1)
    try:
        sock = socket.create_connection((ip, int(port)), timeout=timeout)
    except ConnectionRefusedError:
        raise RpcError(f"RPC server {endpoint}: connection refused (is `localspec rpc-server` running there?)") from None
    except TimeoutError:
        raise RpcError(f"RPC server {endpoint}: no answer within {timeout:g} s (host down or port filtered)") from None
    except OSError as e:
        raise RpcError(f"RPC server {endpoint}: cannot connect ({e.strerror or e})") from None
    with sock:
        try:
            sock.sendall(struct.pack("<BQ", _CMD_HELLO, _CAPS_SIZE) + bytes(_CAPS_SIZE))
            head = _recv_exact(sock, 8)
            (size,) = struct.unpack("<Q", head)
            body = _recv_exact(sock, size) if 4 <= size <= 1024 else b""
        except TimeoutError:
            raise RpcError(
                f"RPC server {endpoint}: accepted the connection but did not answer within {timeout:g} s; "
                "an RPC server serves one client at a time: is another localspec or llama.cpp using it?"
            ) from None
        except OSError as e:
            raise RpcError(f"RPC server {endpoint}: handshake failed ({e.strerror or e}); is it an RPC server?") from None
    if len(body) < 3:
        raise RpcError(f"RPC server {endpoint}: unexpected handshake answer; is it a llama.cpp RPC server?")
    major, minor, patch = body[0], body[1], body[2]
    if major != PROTO_MAJOR or minor > PROTO_MINOR:
        raise RpcError(
            f"RPC server {endpoint} speaks protocol {major}.{minor}.{patch}, this install {PROTO_MAJOR}.{PROTO_MINOR}; "
            f"run the server from the same llama-cpp-python ({llama_cpp.__version__}) as the client"
        )
    return addr


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError("connection closed")
        data += chunk
    return data


# ---------------------------------------------------------------------------- client
def _rpc_reg() -> int:
    require_rpc()
    reg = libggml.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RpcError("llama.cpp reports RPC support but has no RPC backend registered")
    return reg


def rpc_function(name: str, proto):
    """A function of the RPC backend's proc-address table, as a ctypes prototype."""
    fn = libggml.ggml_backend_reg_get_proc_address(_rpc_reg(), name.encode())
    if not fn:
        raise RpcError(f"the RPC backend does not export {name}")
    return proto(fn)


def device_info(dev: int) -> DeviceInfo:
    """Name, description and memory of a ggml_backend_dev_t (remote ones: asked over RPC)."""
    free, total = _sz(0), _sz(0)
    libggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    return DeviceInfo(
        libggml.ggml_backend_dev_name(dev).decode(),
        (libggml.ggml_backend_dev_description(dev) or b"").decode(),
        free.value,
        total.value,
    )


def connect(endpoints: list[str] | tuple[str, ...], timeout: float = 5.0) -> list[str]:
    """Register these RPC servers (each probed first); return the device names they add.

    Idempotent per server: registering one twice would duplicate its devices and open a
    second connection that the one-client server never answers. Call before any model
    loads, since llama.cpp picks a model's devices at load time.
    """
    if not endpoints:
        return []
    require_rpc()
    names: list[str] = []
    with _lock:
        for ep in endpoints:
            addr = resolve(ep)
            if addr not in _registered:  # not again: we may hold its one client slot now
                probe(ep, timeout)
                _install_abort_callback()
                reg = rpc_function("ggml_backend_rpc_add_server", _ADD_SERVER)(addr.encode())
                if not reg:
                    raise RpcError(f"RPC server {ep} offers no devices")
                libggml.ggml_backend_register(reg)
                devs = [libggml.ggml_backend_reg_dev_get(reg, i) for i in range(libggml.ggml_backend_reg_dev_count(reg))]
                _registered[addr] = [device_info(d) for d in devs]
            names += [d.name for d in _registered[addr]]
    return names


def registered() -> dict[str, list[DeviceInfo]]:
    """Servers registered in this process ('ip:port' -> devices with their memory now)."""
    with _lock:
        return {addr: [device_info(libggml.ggml_backend_dev_by_name(d.name.encode())) for d in devs]
                for addr, devs in _registered.items()}


# ---------------------------------------------------------------------------- lost server
_abort_state: dict[str, object] = {"cb": None}


def _gone(addrs: list[str], timeout: float = 0.5, tries: int = 5) -> list[str]:
    """Which of these servers no longer accept connections (a live one still does: the
    kernel completes the connect even while the server is busy with us). Tried a few
    times: a dying process may close our connection just before its listening socket."""
    gone: list[str] = []
    for i in range(tries):
        for addr in addrs:
            if addr in gone:
                continue
            host, port = addr.rsplit(":", 1)
            try:
                socket.create_connection((host, int(port)), timeout=timeout).close()
            except OSError:
                gone.append(addr)
        if gone:
            break
        time.sleep(0.1 * (i + 1))
    return gone


def lost_message(ggml_message: str, gone: list[str] | None = None) -> str:
    """What the user reads when ggml aborts on a registered server (kept testable)."""
    if gone:
        which = ("the RPC server " if len(gone) == 1 else "the RPC servers ") + ", ".join(gone)
    else:
        which = f"one of the RPC servers ({', '.join(_registered) or '?'})"
    return (
        f"error: lost the connection to {which}: {ggml_message.strip()}. "
        "llama.cpp cannot recover from this, so localspec stops: the answer in progress is lost "
        "(the text printed so far stays on screen); nothing was written to the model cache. "
        "Restart the server and run again."
    )


def _on_abort(raw: bytes | None) -> None:
    """ggml's abort hook (runs on ggml's thread just before abort()).

    An RPC failure exits with one clear line and RPC_LOST_EXIT (no core dump); any other
    abort keeps llama.cpp's message and its abort().
    """
    msg = (raw or b"").decode("utf-8", errors="replace")
    try:
        if "ggml-rpc" in msg or "RPC" in msg:
            text = lost_message(msg.split(": ", 1)[-1], _gone(list(_registered)))
            if os.isatty(2):  # a full-screen UI (the TUI) dies with us: give the terminal back
                text = _TERMINAL_RESET + text
            os.write(2, ("\n" + text + "\n").encode())  # after a half-printed answer line
            os._exit(RPC_LOST_EXIT)
        os.write(2, (msg + "\n").encode())
    except Exception:  # noqa: BLE001 - never raise into C
        pass


def _install_abort_callback() -> None:
    if _abort_state["cb"] is None:
        cb = _ABORT_CB(_on_abort)
        libggml.ggml_set_abort_callback.argtypes = [_ABORT_CB]
        libggml.ggml_set_abort_callback.restype = _vp
        libggml.ggml_set_abort_callback(cb)
        _abort_state["cb"] = cb  # must stay referenced for as long as ggml may call it
