"""From LoadOptions to llama.cpp's load parameters: plan the placement, then fill the structs.

The pure planner (localspec.placement) decides; this module feeds it the devices present
(localspec.backend.devices), the models' GGUF headers and the session's context size,
turns its answer into llama_model_params, and raises the one-line errors: GPU layers on
a build without a GPU backend (with the reinstall command), a device name that does not
exist (with the list), a placement that cannot fit (with the flag to change).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from localspec.backend import devices as devs
from localspec.errors import ConfigError, LocalspecError
from localspec.models.gguf import read_header
from localspec.placement.load import LoadOptions
from localspec.placement.plan import (
    AUTO,
    Device,
    Layout,
    LayoutError,
    Need,
    Placement,
    Request,
    plan,
    resolve_offload,
)
from localspec.session import SessionOptions

SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}


@dataclass
class PairPlacement:
    target: Placement
    draft: Placement | None


def request_of(load: LoadOptions, role: str) -> Request:
    return Request(
        role=role, gpu_layers=load.gpu_layers,
        devices=tuple(load.devices) if load.devices is not None else None,
        split_mode=load.split_mode,
        tensor_split=tuple(load.tensor_split) if load.tensor_split else None,
        main_gpu=load.main_gpu,
    )


def need_of(options: SessionOptions, load: LoadOptions) -> Need:
    return Need(n_ctx=options.n_ctx, n_batch=options.n_batch, n_ubatch=options.n_batch,
                n_seq_max=options.n_seq_max, flash_attn=load.flash_attn, kv_offload=load.kv_offload)


def _asks_gpu(load: LoadOptions) -> bool:
    g = load.gpu_layers
    return g == "all" or (isinstance(g, int) and g > 0)


def _no_gpu_error(req: Request, present: list[Device]) -> ConfigError:
    built = devs.gpu_backends()
    names = ", ".join(devs.backends()) or "none"
    if not built:
        return ConfigError(f"{req.flag} {req.gpu_layers}: this llama.cpp build has no GPU backend "
                           f"(backends: {names}); for GPU offload reinstall it: {devs.reinstall_hint()}")
    listing = ", ".join(f"{d.name} ({d.kind})" for d in present)
    return ConfigError(f"{req.flag} {req.gpu_layers}: the {', '.join(built)} backend found no GPU "
                       f"(devices: {listing}); check the driver, CUDA_VISIBLE_DEVICES or -dev, or use -ngl 0")


def _cpu_only(path: Path, req: Request, host: str) -> Placement:
    """A CPU placement without planning (no offload device: today's behaviour, silently)."""
    try:
        n = Layout.from_header(read_header(path)).n_layer + 1
    except LocalspecError:
        n = 0
    return Placement(role=req.role, model=path.name, n_gpu_layers=0, n_layers=n,
                     layers={host: n}, auto=req.gpu_layers == AUTO)


def plan_models(options: SessionOptions, models: list[tuple[str, Path, LoadOptions]],
                present: list[Device] | None = None, *, estimate: bool = False) -> list[Placement]:
    """Placements for (role, path, load) triples against the devices present now.

    With no offload device the models go to the CPU unplanned (as before offload existed:
    a header llama.cpp can load but the planner cannot read must not stop a CPU run);
    estimate=True plans anyway, for the memory figures of `localspec devices`.
    """
    present = devs.devices() if present is None else present
    host = next((d.name for d in present if d.kind == "cpu"), "CPU")
    reqs = [request_of(load, role) for role, _, load in models]
    offloads = [resolve_offload(present, r) for r in reqs]  # unknown -dev names raise here
    for (_, _, load), req, off in zip(models, reqs, offloads, strict=True):
        if _asks_gpu(load) and not off:
            raise _no_gpu_error(req, present)
    if not any(offloads) and not estimate:
        return [_cpu_only(path, req, host) for (_, path, _), req in zip(models, reqs, strict=True)]
    layouts: list[Layout | None] = []
    for (_, path, _), req in zip(models, reqs, strict=True):
        try:
            layouts.append(Layout.from_header(read_header(path)))
        except LayoutError:  # an architecture whose header lacks the shape keys
            if req.gpu_layers == AUTO:
                raise
            layouts.append(None)  # an explicit -ngl is passed on unchecked
    entries = [(lay, need_of(options, load), req)
               for lay, (_, _, load), req in zip(layouts, models, reqs, strict=True) if lay is not None]
    planned = iter(plan(present, entries))
    return [next(planned) if lay is not None else _unchecked(path, req, off)
            for lay, (_, path, _), req, off in zip(layouts, models, reqs, offloads, strict=True)]


def _unchecked(path: Path, req: Request, offload: list[Device]) -> Placement:
    """An explicit -ngl for a model the planner cannot size: llama.cpp's own split applies."""
    ngl = -1 if req.gpu_layers == "all" else int(req.gpu_layers)
    return Placement(role=req.role, model=path.name, n_gpu_layers=ngl, n_layers=0,
                     devices=tuple(d.name for d in offload) if ngl else (),
                     tensor_split=req.tensor_split, auto=False)


def plan_pair(options: SessionOptions, target: str | Path, draft: str | Path | None) -> PairPlacement:
    """The joint placement of a session's target and draft (draft first when both cannot fit)."""
    models = [("target", Path(target), options.target_load)]
    if draft is not None:
        models.append(("draft", Path(draft), options.draft_load))
    placed = plan_models(options, models)
    return PairPlacement(placed[0], placed[1] if draft is not None else None)


def model_params(load: LoadOptions, placement: Placement | None, *, use_mmap: bool = True,
                 load_mtp: bool = False):
    """llama_model_params for a load, and the ctypes arrays it points to (keep them alive).

    load_mtp: also load the GGUF's nextn (MTP) layers, which llama.cpp skips by default
    (the MTP head's context needs them). Callable without loading anything, so tests can
    inspect what reaches llama.cpp.
    """
    p = llama_cpp.llama_model_default_params()
    p.load_mtp = load_mtp
    p.use_extra_bufts = devs.repack_on(load.repack)
    if not use_mmap:
        p.load_mode = 0  # LLAMA_LOAD_MODE_NONE: read the file instead of mapping it
    keep: list[object] = []
    if load.split_mode not in SPLIT_MODES:
        raise ConfigError(f"-sm/--split-mode {load.split_mode}: use none, layer or row")
    p.split_mode = SPLIT_MODES[load.split_mode]
    p.main_gpu = load.main_gpu
    if placement is None:  # no plan: llama.cpp's defaults, except nothing offloaded by default
        p.n_gpu_layers = 0 if load.gpu_layers == AUTO else (-1 if load.gpu_layers == "all" else int(load.gpu_layers))
        return p, keep
    p.n_gpu_layers = placement.n_gpu_layers
    names = list(placement.devices)
    if names or load.devices is not None:  # `-dev none` -> an empty list: no device at all
        arr = (ctypes.c_void_p * (len(names) + 1))()
        for i, name in enumerate(names):
            handle = devs.device_handle(name)
            if not handle:
                raise ConfigError(f"device {name} disappeared since the placement was planned")
            arr[i] = handle
        arr[len(names)] = None
        keep.append(arr)
        p.devices = ctypes.cast(arr, ctypes.c_void_p)
    split = placement.tensor_split
    if split:
        n_max = int(llama_cpp.llama_max_devices())
        ts = (ctypes.c_float * n_max)(*list(split)[:n_max])
        keep.append(ts)
        p.tensor_split = ctypes.cast(ts, ctypes.POINTER(ctypes.c_float))
    return p, keep
