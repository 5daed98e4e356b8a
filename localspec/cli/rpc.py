"""`localspec rpc-server`: lend this machine's devices to another's target (`--rpc`: flags/rpc.py).

The server is llama.cpp's own (ggml-rpc, started from this install), so a `localspec`
client and a llama.cpp `--rpc` client both work against it, as long as both sides come
from the same llama.cpp (the handshake checks the protocol version).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from localspec.errors import LocalspecError

SECURITY_WARNING = (
    "WARNING: {host} is not a loopback address. An RPC server has no authentication and no "
    "encryption: anyone who reaches this port can use its devices and read or change what "
    "they compute. Only bind it on a network you trust (never the open internet)."
)


def _device_list(text: str) -> list[str]:
    return [d.strip() for d in text.replace("/", ",").split(",") if d.strip()]


def cmd_rpc_server(a: argparse.Namespace) -> int:
    from localspec import tools

    server = tools.rpc_server(a.host, a.port, a.device or None, a.threads, a.cache)
    if server.exposed:
        print(SECURITY_WARNING.format(host=a.host), file=sys.stderr)
    print(f"localspec rpc-server: listening on {server.endpoint} (ggml RPC protocol "
          f"{tools.rpc_protocol()}, {server.threads} CPU threads, "
          f"cache {server.cache_dir or 'off'})")
    for d in server.devices:
        print(f"  {d.name}: {d.description} ({d.total >> 20} MiB, {d.free >> 20} MiB free)")
    print(f"clients: localspec run --rpc {server.endpoint} ... ; Ctrl-C stops", flush=True)

    def _term(signum, frame):  # SIGTERM (service managers, tests) stops it like Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    server.start()
    try:
        while server.alive(0.5):
            pass
    except KeyboardInterrupt:
        print(f"localspec rpc-server on {server.endpoint} stopped", file=sys.stderr, flush=True)
        tools.flush_c_stdio()
        # ggml's accept loop cannot be interrupted; exiting normally would run C++ static
        # destructors under that live thread, so leave at once (nothing here needs cleanup).
        os._exit(0)
    raise LocalspecError(f"the RPC server on {server.endpoint} stopped on its own (see ggml's message above)")


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "rpc-server", help="serve this machine's devices to a target on another machine (llama.cpp RPC)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Start llama.cpp's RPC server from this install. Another machine then runs "
        "`localspec run/chat/serve --rpc HOST:PORT` and its target's layers may go to this "
        "machine's devices. One client at a time; no authentication: keep it on a trusted network.",
    )
    p.add_argument("--host", default="127.0.0.1",
                   help="IPv4 address to listen on (0.0.0.0 = every interface; warns: no authentication)")
    p.add_argument("--port", type=int, default=50052, help="TCP port")
    p.add_argument("--device", "-d", action="extend", type=_device_list, default=[], metavar="DEV[,DEV...]",
                   help="devices to serve, e.g. CPU or CUDA0 (default: every GPU, else the CPU)")
    p.add_argument("--threads", "-t", type=int, default=None, help="CPU threads (default: half the cores)")
    p.add_argument("--cache", nargs="?", default=None, const=os.path.expanduser("~/.cache/llama.cpp/rpc"),
                   metavar="DIR", help="keep received tensors in DIR so a reconnecting client skips the "
                   "upload of large ones (no DIR: llama.cpp's ~/.cache/llama.cpp/rpc)")
    p.set_defaults(func=cmd_rpc_server)
    return p
