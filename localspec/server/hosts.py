"""Which Host names and web origins the server answers (guard.py applies them).

Kept apart from guard.py so the `serve` command can compute the policy from its flags
without importing Starlette (which it reports as missing in one line).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_policy(bind_host: str, allowed: Iterable[str] = ()) -> frozenset[str] | None:
    """The Host names served (None: any). Loopback names are always allowed: a rebinding
    page cannot send them (its Host is its own domain), so they cost no safety."""
    names = [h.strip() for h in allowed if h.strip()]
    if "*" in names:
        return None
    if not names and not is_loopback(bind_host):
        return None
    return frozenset(LOOPBACK_NAMES | {_normal_host(bind_host)} | {_normal_host(h) for h in names})


def origin_policy(origins: Iterable[str]) -> frozenset[str] | None:
    """The web origins served (None: any, from `--cors '*'`); empty: none."""
    names = [o.strip() for o in origins if o.strip()]
    if "*" in names:
        return None
    return frozenset(normal_origin(o) for o in names)


def host_name(header: str) -> str:
    """The name in a Host header without its port: `[::1]:8080` -> `[::1]`, `Localhost.` ->
    `localhost`."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def _normal_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if ":" in host and not host.startswith("["):  # a bare IPv6 address
        return f"[{host}]"
    return host


def normal_origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()
