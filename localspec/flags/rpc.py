"""`--rpc HOST:PORT[,HOST:PORT...]`: llama.cpp RPC servers whose devices may hold the target's layers.

Shared by run / chat / serve / devices and the benches; the server side, `localspec
rpc-server`, is a command of its own (cli/rpc.py).
"""

from __future__ import annotations

import argparse


def _endpoints(text: str) -> list[str]:
    """argparse type of --rpc: 'HOST:PORT[,HOST:PORT...]' -> list (each checked)."""
    from localspec.tools import check_endpoint

    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            check_endpoint(part)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        out.append(part)
    if not out:
        raise argparse.ArgumentTypeError("give at least one HOST:PORT")
    return out


def add_rpc_arg(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The `--rpc` flag (repeatable, comma lists) -> Namespace.rpc: list of 'HOST:PORT'."""
    p.add_argument("--rpc", action="extend", type=_endpoints, default=[], metavar="HOST:PORT[,HOST:PORT...]",
                   help="llama.cpp RPC servers (`localspec rpc-server`) whose devices (RPC0, RPC1, ...) "
                   "may hold the target's layers; registered before any model loads")
