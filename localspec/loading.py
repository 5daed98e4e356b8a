"""Opening a session: resolve (fetching if needed) and load the target, its draft and an
MTP head, placed on the devices (GPU offload, RPC) before any context is made.

Why apart from runtime.py: loading decides *what* runs (files, devices, vocabulary
compatibility, progress for long steps); RuntimeSession is how a loaded pair decodes.
"""

from __future__ import annotations

from localspec.backend import Model, check_vocab_compat
from localspec.backend.logs import configure_logging
from localspec.backend.offload import plan_pair
from localspec.models.gguf import nextn_layers
from localspec.runtime import RuntimeSession
from localspec.session import ProgressFn, SessionOptions


def _resolve(spec: str, progress: ProgressFn | None) -> str:
    from localspec.models import resolve_model

    return str(resolve_model(spec, fetch=True, progress=True))


def open_session(
    target: str,
    draft: str | None = None,
    options: SessionOptions | None = None,
    progress: ProgressFn | None = None,
) -> RuntimeSession:
    """Resolve (fetching if needed) and load target and draft; check their vocabularies."""
    return load_session(target, draft, options or SessionOptions(), progress)


def load_session(
    target: str, draft: str | None, options: SessionOptions, progress: ProgressFn | None
) -> RuntimeSession:
    """Resolve, load and check a target (and optional draft)."""
    say = progress or (lambda msg, frac: None)
    if options.rpc:  # llama.cpp picks a model's devices at load time: register servers first
        from localspec.backend.rpc import connect

        say(f"connecting to {', '.join(options.rpc)}", 0.0)
        connect(options.rpc)
    say(f"resolving {target}", 0.0)
    tpath = _resolve(target, progress)
    dpath = _resolve(draft, progress) if draft else None
    say(f"loading {target}", 0.3)
    configure_logging(options.verbose)  # -v shows the backends' start-up lines too
    plan = plan_pair(options, tpath, dpath)  # where layers go (GPU offload), draft first
    load_mtp = options.mtp is True or (options.mtp is None and not dpath and nextn_layers(tpath) > 0)
    tmodel = Model(tpath, verbose=options.verbose, load=options.target_load, placement=plan.target, load_mtp=load_mtp)
    dmodel = None
    if dpath:
        say(f"loading {draft}", 0.6)
        dmodel = Model(dpath, verbose=options.verbose, load=options.draft_load, placement=plan.draft)
        check_vocab_compat(tmodel, dmodel)
    say("creating contexts", 0.9)
    sess = RuntimeSession(tmodel, dmodel, options, target_name=target, draft_name=draft)
    sess.progress = progress
    say("ready", 1.0)
    return sess
