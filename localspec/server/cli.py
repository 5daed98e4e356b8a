"""The `serve` command: load the pair, bind, and run the app under uvicorn until Ctrl-C.

Binding happens here (not inside uvicorn) so a port in use is a one-line error with exit 2
like every other bad input, and so the tests and the benchmark can hand uvicorn a socket.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from localspec.errors import ConfigError, LocalspecError
from localspec.flags.args import add_gen_args, add_model_args, asked_of, session_options
from localspec.flags.reasoning import add_reasoning_format_arg
from localspec.server.hosts import host_policy, is_loopback, origin_policy
from localspec.settings import MAX_TOKENS, check, resolve


def register(sub) -> None:
    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server (chat + completions, streaming)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_model_args(s, default_pair=True)
    g = s.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (another than loopback without --api-key prints a warning)")
    g.add_argument("--port", type=int, default=8080, help="TCP port")
    g.add_argument("--api-key", default=os.environ.get("LOCALSPEC_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1/*, /slots and /metrics (default: $LOCALSPEC_API_KEY)")
    g.add_argument("-np", "--parallel", type=int, default=1, metavar="N",
                   help="slots: N requests decode at once, their target verifications (and draft steps) "
                   "joined into one llama_decode per round (llama-server's flag); --ctx and --batch are "
                   "totals split evenly across the slots, as there")
    g.add_argument("--queue", type=int, default=16,
                   help="requests that may wait behind the running one; more get 429 + Retry-After")
    g.add_argument("--no-prefetch", action="store_true",
                   help="do not evaluate a FIM client's likely next prompt while idle (the suggestion's next word "
                        "typed: its suffix is ready when the request comes; any request stops it within ~0.5 s)")
    g.add_argument("--alias", "-a", default=None, help="model id reported by /v1/models (default: the target's name)")
    g.add_argument("--max-body", type=int, default=4 * 1024 * 1024, help="largest request body in bytes (413 above)")
    g.add_argument("--drain", type=float, default=10.0,
                   help="seconds running requests may finish after Ctrl-C / SIGTERM before they are stopped")
    g.add_argument("--allowed-hosts", type=_names, default=[], metavar="H[,H]",
                   help="Host header names served besides localhost, 127.0.0.1, [::1] and the --host "
                   "address; with a loopback --host every other Host is refused (403, against DNS "
                   "rebinding), with another --host any Host is served unless this names them; '*' = any")
    g.add_argument("--cors", type=_names, default=[], metavar="ORIGIN[,ORIGIN]",
                   help="web origins (e.g. http://localhost:3000) allowed to call the API from a browser: "
                   "preflights answered, Access-Control-Allow-Origin sent; requests with any other Origin "
                   "are refused (403); '*' = any origin (default: none)")
    g.add_argument("--ignore-unknown-fields", action="store_true",
                   help="accept request fields localspec does not know (listed in the response's "
                   "localspec.ignored) instead of answering 400")
    g.add_argument("--no-special-in-content", action="store_true",
                   help="tokenize message text as plain text: a '<|im_start|>' inside user content stays "
                   "characters instead of becoming the control token (by default it becomes one, as in "
                   "llama-server); the chat template's own markers are control tokens either way")
    g.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="uvicorn's log level (info logs each request)")
    add_gen_args(s)
    add_reasoning_format_arg(s, server=True)
    s.set_defaults(func=cmd_serve)


def model_id(target: str) -> str:
    """The id clients see: the registry name, or a file's stem."""
    return Path(target).stem if target.endswith(".gguf") or os.sep in target else target


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


def _names(value: str) -> list[str]:
    """A comma-separated flag value (--allowed-hosts, --cors)."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name (comma-separated)")
    return names


def _check(a: argparse.Namespace) -> None:
    if not 0 <= a.port <= 65535:
        raise ConfigError(f"--port must be in 0..65535 (got {a.port})")
    if a.queue < 1:
        raise ConfigError(f"--queue must be >= 1 (got {a.queue})")
    if a.max_body < 1024:
        raise ConfigError(f"--max-body must be >= 1024 bytes (got {a.max_body})")
    if a.drain < 0:
        raise ConfigError(f"--drain must be >= 0 (got {a.drain})")
    if not 1 <= a.parallel <= 16:
        raise ConfigError(f"-np/--parallel must be in 1..16 (got {a.parallel})")


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
    asked = asked_of(a)  # the flags; the model's card fills the rest once it loads (settings.resolve)
    _check(a)
    try:
        import uvicorn

        from localspec.server.app import ServerConfig, create_app
        from localspec.server.schema import Limits
    except ImportError as e:
        raise LocalspecError(f"localspec serve needs starlette and uvicorn ({e}): pip install starlette uvicorn") from None
    from localspec.loading import open_session
    from localspec.models import default_pair

    target, draft = a.target, a.draft
    if target is None:
        target, d = default_pair()
        draft = draft or d
    if not is_loopback(a.host) and not a.api_key:
        print(f"warning: serving on {a.host} without --api-key: anyone who can reach port {a.port} "
              "can use these models", file=sys.stderr)
    from localspec.pool import open_pool, pool_options, slot_options
    from localspec.server.loading import Loading

    n = a.parallel
    opts = session_options(a)
    # every number is checked against what ONE slot gets (its share of --ctx and --batch)
    per_slot, notes = check(slot_options(pool_options(opts, n), n), asked, has_draft=draft is not None)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    opts = replace(opts, threads=per_slot.threads)
    sock = bind(a.host, a.port)
    loading = Loading(sock)  # 503 "Loading model" with the progress until uvicorn serves
    host = f"[{a.host}]" if ":" in a.host else a.host
    port = sock.getsockname()[1]
    print(f"localspec serve: loading on http://{host}:{port} (503 with the progress until ready)", file=sys.stderr)

    def say(msg: str, frac: float) -> None:
        print(f"[{frac:4.0%}] {msg}", file=sys.stderr)
        loading.set(msg, frac)

    try:
        pool = open_pool(target, draft, opts, n, progress=say) if n > 1 else None
        sess = pool.base if pool is not None else open_session(target, draft, opts, progress=say)
    except BaseException:
        loading.stop()
        sock.close()
        raise
    app = None
    try:
        settings = resolve(asked, sess, target)  # a request's own fields still win (server/schema.py)
        cfg = settings.cfg
        _log_to_stderr(a.log_level)
        if pool is None:  # time the cost model while serving: requests meanwhile run what needs no missing curve
            sess.start_timing(cfg)
        else:
            # slots share the real contexts: time them before any slot batches (progress on
            # stderr), then every slot prices its blocks with that model
            if cfg.method == "auto":
                sess.explain(cfg)
            pool.share_costs()
        config = ServerConfig(model_id=a.alias or model_id(target),
                              draft=model_id(draft) if draft else None, api_key=a.api_key or None,
                              max_queue=a.queue, max_body=a.max_body, prefetch=not a.no_prefetch,
                              allowed_hosts=host_policy(a.host, a.allowed_hosts), cors=origin_policy(a.cors),
                              special_in_content=not a.no_special_in_content,
                              limits=Limits(cfg=cfg, n_ctx=per_slot.n_ctx or MAX_TOKENS,
                                            n_batch=per_slot.n_batch, n_seq_max=per_slot.n_seq_max,
                                            lenient=a.ignore_unknown_fields,
                                            reasoning_format=a.reasoning_format,
                                            reasoning_budget=settings.budget,
                                            template_kwargs=settings.template_kwargs))
        app = create_app(sess, config, pool)
        # uvicorn's own timeout is only a backstop: _drain stops generations first, so cut-off
        # streams still end with a last chunk and [DONE]
        server = uvicorn.Server(uvicorn.Config(app, log_level=a.log_level, lifespan="on",
                                               timeout_graceful_shutdown=a.drain + 5))
        threading.Thread(target=_drain, args=(server, app.state.worker, a.drain), daemon=True).start()
        loading.stop()
        print(f"localspec serve: http://{host}:{port}/v1  model {config.model_id} (draft {config.draft}, "
              f"method {cfg.method}{f', {n} slots' if n > 1 else ''}); Ctrl-C stops", file=sys.stderr)
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
        loading.stop()
        sock.close()
        if app is None or not app.state.worker.alive:  # a generation stuck past the drain keeps its models
            sess.close()
