"""The engine's services besides generation, for frontends.

Frontends (cli/, tui/, server/, bench/) reach the engine through two doors only: sessions
(runtime.py: generation, chat, the cost model) and this module (what llama.cpp can run on,
where a pair would be placed, RPC servers, re-quantization, PARSE's judge probe). Everything
behind them (backend/: ctypes and llama_cpp; decode/: the loops and the KV bookkeeping) may
change without a frontend noticing; tests/test_imports.py holds the wall. Imports are lazy:
`localspec --help` must not load llama.cpp.

The rule for what lives here: a door a frontend needs below the Session API, one function
each, typed with the engine type it returns (imported for type checking only, so nothing
loads until it is called); nothing that a Session method already answers.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localspec.backend.rpc_server import RpcServer
    from localspec.decode.drafters.base import DraftRequest
    from localspec.decode.drafters.lookup import NgramIndex, Regions
    from localspec.decode.drafters.suffix import Continuations, SuffixDrafter, SuffixStore
    from localspec.decode.drafters.suffix_shared import SharedSuffix, SlotSuffix
    from localspec.decode.parse.probe import Probe
    from localspec.placement.load import LoadOptions
    from localspec.placement.plan import Device, Placement
    from localspec.session import SessionOptions


# ------------------------------------------------------------------ devices and placement
def devices() -> list[Device]:
    """Every device llama.cpp's backends found (CPU included), with free/total memory."""
    from localspec.backend import devices as d

    return d.devices()


def backends() -> list[str]:
    from localspec.backend import devices as d

    return d.backends()


def gpu_backends() -> list[str]:
    from localspec.backend import devices as d

    return d.gpu_backends()


def amx_kernels() -> bool:
    """Whether this llama.cpp has ggml's AMX kernels (auto leaves them unused: they crash on
    some machines; `--repack` uses them anyway)."""
    from localspec.backend import devices as d

    return d.amx_kernels()


def reinstall_hint() -> str:
    from localspec.backend import devices as d

    return d.reinstall_hint()


def plan_models(opts: SessionOptions, models: Sequence[tuple[str, Path, LoadOptions]],
                present: Sequence[Device] | None = None, *, estimate: bool = False) -> list[Placement]:
    """Where each (role, path, load) would go under `opts` (no model is loaded)."""
    from localspec.backend.offload import plan_models as plan

    return plan(opts, models, present, estimate=estimate)


# ------------------------------------------------------------------ RPC
def connect_rpc(endpoints: Sequence[str]) -> None:
    """Register llama.cpp RPC servers (checked first: refused, busy, not RPC, other version)."""
    from localspec.backend.rpc import connect

    connect(list(endpoints))


def check_endpoint(text: str) -> None:
    """ValueError naming the problem when `text` is not HOST:PORT."""
    from localspec.backend.rpc import split_endpoint

    split_endpoint(text)


def rpc_protocol() -> str:
    from localspec.backend import rpc

    return f"{rpc.PROTO_MAJOR}.{rpc.PROTO_MINOR}"


def rpc_server(host: str, port: int, devices: list[str] | None, threads: int | None, cache: str | None) -> RpcServer:
    """ggml's RPC server of this install (backend/rpc_server.py's RpcServer, not started)."""
    from localspec.backend import rpc_server as rs

    return rs.RpcServer(host, port, devices, threads, cache)


def flush_c_stdio() -> None:
    from localspec.backend import rpc_server as rs

    rs.flush_c_stdio()


# ------------------------------------------------------------------ models
def check_quant_type(name: str) -> int:
    """llama.cpp's file-type id of a quantization name (ConfigError naming the valid ones)."""
    from localspec.backend.quantize import ftype_id

    return ftype_id(name)


def quantize(src: Path, out: Path, qtype: str, *, threads: int | None = None, progress: bool = True,
             pure: bool = False) -> Path:
    from localspec.backend.quantize import quantize as q

    return q(src, out, qtype, threads=threads, progress=progress, pure=pure)


# ------------------------------------------------------------------ constrained decoding
def constraint_costs(sess: Any, spec: Any, prompt: list[int], answer: list[int], L: int,
                     sampling: Any) -> tuple[list[float], list[float]]:
    """Seconds per iteration on the session's target, the answer replayed in right drafts of L
    tokens: (with the grammar, the same rows without it) (decode/constraint_cost.py)."""
    from localspec.decode.constraint_cost import iteration_costs

    return iteration_costs(sess.target_model, spec, prompt, answer, L, sampling, sess.options.threads)


def forced_runs(sess: Any, spec: Any, answer: list[int]) -> list[int]:
    """Per answer position, how many tokens from there the grammar forces and the answer
    goes on with (decode/constraint_cost.forced_runs): `bench ceiling` on a constrained set."""
    from localspec.decode.constraint_cost import forced_runs as runs

    return runs(sess.grammars.compiled(spec), answer)  # compiled once: the turn that wrote it did


# ------------------------------------------------------------------ PARSE calibration
def parse_probe(sess: Any) -> Probe:
    """The judge probe on a loaded pair (decode/parse/probe.py): what `bench parse
    calibrate` reads below the Session API, from the same pieces PARSE runs."""
    from localspec.decode.parse.probe import Probe

    return Probe(sess)


# ------------------------------------------------------------------ the suffix proposer
def suffix_store(max_tokens: int) -> SuffixStore:
    """An empty suffix store (decode/drafters/suffix.SuffixStore): `bench suffix` times the proposer
    on it with no model, from the same pieces a session's turns run."""
    from localspec.decode.drafters.suffix import SuffixStore

    return SuffixStore(max_tokens)


def shared_suffix(max_tokens: int) -> SharedSuffix:
    """An empty shared store of a pool's slots (decode/drafters/suffix_shared.SharedSuffix)."""
    from localspec.decode.drafters.suffix_shared import SharedSuffix

    return SharedSuffix(max_tokens)


def slot_suffix(shared: SharedSuffix, max_tokens: int) -> SlotSuffix:
    """A slot's view (decode/drafters/suffix_shared.SlotSuffix): an empty store of its own plus `shared`."""
    from localspec.decode.drafters.suffix import SuffixStore
    from localspec.decode.drafters.suffix_shared import SlotSuffix

    return SlotSuffix(SuffixStore(max_tokens), shared)


def suffix_proposer(store: Continuations, depth: int, min_prob: float, factor: float = 1.0) -> SuffixDrafter:
    """The suffix proposer over `store` (decode/drafters/suffix.SuffixDrafter)."""
    from localspec.decode.drafters.suffix import SuffixDrafter

    return SuffixDrafter(store, depth, min_prob, factor)


def ngram_index(n_min: int, n_max: int, barrier: Container[int] = frozenset()) -> NgramIndex:
    """An empty n-gram index (decode/drafters/lookup.NgramIndex): `bench ceiling` replays the `ngram`
    proposer's drafts with it, the same lookups a session's turns make (with the session's
    `lookup_barrier`)."""
    from localspec.decode.drafters.lookup import NgramIndex

    return NgramIndex(n_min, n_max, barrier=barrier)


def lookup_barrier(sess: Any) -> Container[int]:
    """The tokens a session's lookups stop before: its target's control and end-of-generation ids."""
    return sess.target_model.control_ids


def model_barrier(path: Path, tokens: Iterable[int]) -> frozenset[int]:
    """Which of `tokens` a session's lookups stop before (lookup_barrier), read from a model
    file without a session: `bench priors` on saved answers passes every token they hold."""
    from localspec.backend.model import Model

    model = Model(path)
    try:
        return frozenset(t for t in set(tokens) if model.is_control(t))
    finally:
        model.close()


def lookup_regions(prompt: Sequence[int], suf: int = -1, mid: int = -1) -> Regions:
    """Where a lookup's match may continue in a turn given `prompt` (decode/drafters/lookup.Regions:
    the prompt, the answer, a FIM prompt's prefix and suffix when its FIM token ids are given)."""
    from localspec.decode.drafters.lookup import regions_of

    return regions_of(prompt, suf, mid)


def draft_request(committed: list[int], K: int, L: int) -> DraftRequest:
    """What a drafter is asked for (decode/drafters/base.DraftRequest)."""
    from localspec.decode.drafters.base import DraftRequest

    return DraftRequest(committed, K, L)


def draft_agreement(path: Path, texts: list[tuple[list[int], list[int]]], threads: int,
                    n_batch: int = 512) -> list[list[bool]]:
    """Per (prompt, answer): where a greedy draft model agrees with the answer, position by
    position, from one teacher-forced decode (decode/agreement.py): `bench ceiling --draft`'s input."""
    from localspec.decode.agreement import draft_agreement as agree

    return agree(path, texts, threads, n_batch)


def draft_calibration(path: Path, texts: list[tuple[list[int], list[int]]], threads: int,
                      n_batch: int = 512) -> list[list[tuple[bool, float]]]:
    """draft_agreement with the draft's confidence at each position (decode/agreement.py):
    `bench priors -md` fits the acceptance calibration a first turn starts from."""
    from localspec.decode.agreement import draft_calibration as cal

    return cal(path, texts, threads, n_batch)


def verify_curve(path: Path, threads: int, sizes: Sequence[int], reps: int = 5) -> dict[int, float]:
    """{n: seconds} of one target decode of n tokens with every row's logits, after 64 tokens
    of context (the cost model's own timing, costmodel/curves.measure): what a verification
    of n - 1 drafted tokens pays, where llama-bench's pp reads one row's logits only."""
    from localspec.backend.context import Context
    from localspec.backend.model import Model
    from localspec.costmodel.curves import measure

    model = Model(path)
    try:
        ctx = Context(model, n_ctx=512, n_batch=max(64, *sizes), n_seq_max=1, threads=threads)
        try:
            curve = measure(ctx, tuple(sorted(sizes)), reps=reps)
        finally:
            ctx.close()
    finally:
        model.close()
    return {n: curve.measured(n) for n in curve.sizes}
