"""The `serve` command: load the pair, bind, and run the app under uvicorn until Ctrl-C.

Binding happens here (not inside uvicorn) so a port in use is a one-line error with exit 2
like every other bad input, and so the tests and the benchmark can hand uvicorn a socket.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from localspec.cli.args import add_gen_args, add_model_args, gen_config, session_options
from localspec.cli.input import MAX_TOKENS, check_options
from localspec.cli.reasoning import add_reasoning_format_arg, budget_of, template_kwargs_of
from localspec.errors import ConfigError, LocalspecError


def register(sub) -> None:
    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server (chat + completions, streaming)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_model_args(s, default_pair=True)
    g = s.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (another than loopback without --api-key prints a warning)")
    g.add_argument("--port", type=int, default=8080, help="TCP port")
    g.add_argument("--api-key", default=os.environ.get("LOCALSPEC_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1/* (default: $LOCALSPEC_API_KEY)")
    g.add_argument("--queue", type=int, default=16,
                   help="requests that may wait behind the running one; more get 429 + Retry-After")
    g.add_argument("--alias", "-a", default=None, help="model id reported by /v1/models (default: the target's name)")
    g.add_argument("--max-body", type=int, default=4 * 1024 * 1024, help="largest request body in bytes (413 above)")
    g.add_argument("--drain", type=float, default=10.0,
                   help="seconds running requests may finish after Ctrl-C / SIGTERM before they are stopped")
    g.add_argument("--ignore-unknown-fields", action="store_true",
                   help="accept request fields localspec does not know (listed in the response's "
                   "localspec.ignored) instead of answering 400")
    g.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="uvicorn's log level (info logs each request)")
    add_gen_args(s)
    add_reasoning_format_arg(s, server=True)
    s.set_defaults(func=cmd_serve)


def model_id(target: str) -> str:
    """The id clients see: the registry name, or a file's stem."""
    return Path(target).stem if target.endswith(".gguf") or os.sep in target else target


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) socket, or a LocalspecError saying why not."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        raise LocalspecError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def _check(a: argparse.Namespace) -> None:
    if not 0 <= a.port <= 65535:
        raise ConfigError(f"--port must be in 0..65535 (got {a.port})")
    if a.queue < 1:
        raise ConfigError(f"--queue must be >= 1 (got {a.queue})")
    if a.max_body < 1024:
        raise ConfigError(f"--max-body must be >= 1024 bytes (got {a.max_body})")
    if a.drain < 0:
        raise ConfigError(f"--drain must be >= 0 (got {a.drain})")


def _drain(server, worker, seconds: float) -> None:
    """Once uvicorn starts shutting down, let work finish for `seconds`, then stop it."""
    while not server.should_exit:
        time.sleep(0.1)
    worker.drain(seconds)


def _log_to_stderr(level: str) -> None:
    """localspec's own log lines (the cost model's timing, a request that waited for it) on
    stderr beside uvicorn's, at its --log-level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    logger = logging.getLogger("localspec")
    logger.addHandler(handler)
    logger.setLevel(level.upper())


def _sigterm(signum, frame) -> None:
    raise SystemExit(0)


def cmd_serve(a: argparse.Namespace) -> int:
    cfg = gen_config(a)
    _check(a)
    budget = budget_of(a)
    try:
        import uvicorn

        from localspec.server.app import ServerConfig, create_app
        from localspec.server.schema import Limits
    except ImportError as e:
        raise LocalspecError(f"localspec serve needs starlette and uvicorn ({e}): pip install starlette uvicorn") from None
    from localspec.models import default_pair
    from localspec.runtime import open_session

    target, draft = a.target, a.draft
    if target is None:
        target, d = default_pair()
        draft = draft or d
    if not is_loopback(a.host) and not a.api_key:
        print(f"warning: serving on {a.host} without --api-key: anyone who can reach port {a.port} "
              "can use these models", file=sys.stderr)
    opts = session_options(a)
    for note in check_options(opts, cfg, has_draft=draft is not None):
        print(f"note: {note}", file=sys.stderr)
    sock = bind(a.host, a.port)
    sess = open_session(target, draft, opts,
                        progress=lambda msg, frac: print(f"[{frac:4.0%}] {msg}", file=sys.stderr))
    app = None
    try:
        from localspec.cli.reasoning import apply_model_sampling

        apply_model_sampling(sess, target, a, cfg)  # a request's own fields still win
        _log_to_stderr(a.log_level)
        # time the cost model while serving: requests meanwhile run what needs no missing curve
        sess.start_timing(cfg)
        config = ServerConfig(model_id=a.alias or model_id(target),
                              draft=model_id(draft) if draft else None, api_key=a.api_key or None,
                              max_queue=a.queue, max_body=a.max_body,
                              limits=Limits(cfg=cfg, n_ctx=opts.n_ctx or MAX_TOKENS, n_batch=opts.n_batch,
                                            n_seq_max=opts.n_seq_max, lenient=a.ignore_unknown_fields,
                                            reasoning_format=a.reasoning_format, reasoning_budget=budget,
                                            template_kwargs=template_kwargs_of(sess, a) or None))
        app = create_app(sess, config)
        # uvicorn's own timeout is only a backstop: _drain stops generations first, so cut-off
        # streams still end with a last chunk and [DONE]
        server = uvicorn.Server(uvicorn.Config(app, log_level=a.log_level, lifespan="on",
                                               timeout_graceful_shutdown=a.drain + 5))
        threading.Thread(target=_drain, args=(server, app.state.worker, a.drain), daemon=True).start()
        host = f"[{a.host}]" if ":" in a.host else a.host
        port = sock.getsockname()[1]
        print(f"localspec serve: http://{host}:{port}/v1  model {config.model_id} (draft {config.draft}, "
              f"method {cfg.method}); Ctrl-C stops", file=sys.stderr)
        previous = signal.signal(signal.SIGTERM, _sigterm)  # uvicorn re-raises it after draining
        try:
            server.run(sockets=[sock])
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C / SIGTERM, re-raised by uvicorn once drained
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
        print("localspec serve: stopped", file=sys.stderr)
        return 0
    finally:
        sock.close()
        if app is None or not app.state.worker.alive:  # a generation stuck past the drain keeps its models
            sess.close()
