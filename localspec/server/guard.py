"""Browser-safe defaults: which Host names and which web origins may talk to the server.

A server on 127.0.0.1 is still reachable from every web page the user opens: the page can
POST to http://127.0.0.1:8080 (a "simple" request with a text/plain body needs no CORS
preflight), and with DNS rebinding its own domain can come to resolve to 127.0.0.1, which
makes it same-origin and lets it read the answers too. Three rules close that:

- Host: with a loopback bind, only requests naming the server as `localhost`, `127.0.0.1`,
  `[::1]` (or the address it was bound to, or a name in `--allowed-hosts`) are served; any
  other Host is 403. A rebinding page sends its own domain as Host, so it is refused. A
  non-loopback bind serves any Host unless --allowed-hosts names them (the API key is the
  protection there). `--allowed-hosts '*'` turns the check off.
- Origin: a request that carries an `Origin` header (only browsers send one) is served only
  if `--cors` names that origin; others get 403, so a page cannot even spend the model's
  time. A preflight (OPTIONS with Access-Control-Request-Method) from a named origin is
  answered here, before authentication (browsers never send credentials on a preflight),
  and responses to named origins carry Access-Control-Allow-Origin. None by default.
- Content-Type: POST bodies must be application/json (body.py, 415 otherwise), which a page
  cannot send cross-origin without the preflight above.
"""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from localspec.server.errors import ApiError
from localspec.server.hosts import LOOPBACK_NAMES, host_name, normal_origin

ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, X-Api-Key"  # when a preflight names none
MAX_AGE = "600"


class Guard:
    """ASGI middleware applying the Host and Origin rules and answering CORS preflights."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None = LOOPBACK_NAMES,
                 origins: frozenset[str] | None = frozenset()) -> None:
        self.app = app
        self.hosts = hosts
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        # no Host at all is an HTTP/1.0 client, not a browser: nothing to rebind
        if self.hosts is not None and host is not None and host_name(host) not in self.hosts:
            shown = host.encode("ascii", "backslashreplace").decode("ascii")[:100]
            await ApiError(403, f"Host '{shown}' is not served: this server answers to "
                           f"{', '.join(sorted(self.hosts))} (start it with --allowed-hosts to add names)",
                           type="permission_error", code="host_not_allowed").response()(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        if self.origins is not None and normal_origin(origin) not in self.origins:
            shown = origin.encode("ascii", "backslashreplace").decode("ascii")[:100]
            await ApiError(403, f"Origin '{shown}' is not allowed: web pages may use this server only "
                           "from origins named by --cors", type="permission_error",
                           code="origin_not_allowed").response()(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await self._preflight(origin, headers)(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                out["Access-Control-Allow-Origin"] = origin
                out["Access-Control-Expose-Headers"] = "Retry-After"
                out.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, send_with_cors)

    @staticmethod
    def _preflight(origin: str, headers: Headers) -> Response:
        return Response(status_code=204, headers={
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Methods": ALLOW_METHODS,
            "Access-Control-Allow-Headers": headers.get("access-control-request-headers") or ALLOW_HEADERS,
            "Access-Control-Max-Age": MAX_AGE,
            "Vary": "Origin",
        })
