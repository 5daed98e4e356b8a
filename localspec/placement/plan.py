"""Where each model's layers go: a pure planner over devices, layer sizes and KV needs.

Why localspec plans this itself: llama.cpp's own fit (`common_fit_params`) lives in
libllama-common, which the llama-cpp-python wheel does not ship, and it fits ONE model.
Speculation loads two, and a draft spilled to the CPU costs more per drafted token than it
saves, so the draft goes fully onto the GPU first and the target gets what is left, its
remaining layers on the CPU. Memory per device = the weights of the layers placed there
(bytes per layer from the GGUF tensor table) + their KV cache (sized for the context) + a
compute buffer, kept 1 GiB under the device's free memory as llama.cpp does.

The layer-to-device rule mirrors llama.cpp's `load_tensors`: the last `n_gpu_layers` of
the n_layer + 1 layers (the +1 is the output layer) are offloaded, split over the devices
by `tensor_split` proportions; the input embedding always stays on the CPU. The planner
hands llama.cpp its per-device layer counts as `tensor_split`, which reproduces its split
exactly. Nothing here imports llama_cpp: tests run it on synthetic devices.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from localspec.errors import ConfigError
from localspec.placement.layout import Layout, LayoutError, Need, compute_bytes, kv_bytes

__all__ = ["Device", "Layout", "LayoutError", "Need", "Placement", "PlacementError", "Request",
           "assign_layers", "plan", "resolve_offload", "usage"]

GiB = 1 << 30
MARGIN = GiB  # kept free on every device (llama.cpp's fit keeps 1 GiB too)
ALL = "all"
AUTO = "auto"


class PlacementError(ConfigError):
    """The asked placement does not fit (names the flag to change) or is malformed."""


@dataclass(frozen=True)
class Device:
    """One device as the planner sees it. kind: "cpu" (the host), "gpu" or "igpu".

    unified: its memory is the host's RAM (Apple-silicon Metal, integrated GPUs), so what
    it holds also counts against the host.
    """

    name: str
    kind: str
    free: int
    total: int
    backend: str = ""
    description: str = ""
    unified: bool = False


@dataclass(frozen=True)
class Request:
    """One model's load flags as the planner needs them (role: "target" or "draft").

    split_mode "row" is sized like "layer" (each device's share of the rows is its share
    of the layers); "none" keeps every offloaded layer on devices[main_gpu]."""

    role: str = "target"
    gpu_layers: int | str = AUTO
    devices: tuple[str, ...] | None = None
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] | None = None
    main_gpu: int = 0

    @property
    def flag(self) -> str:
        return "-ngld/--gpu-layers-draft" if self.role == "draft" else "-ngl/--gpu-layers"


@dataclass(frozen=True)
class Placement:
    """The plan for one model: what llama.cpp is given and what it should cost.

    devices/tensor_split are passed to llama_model_params (devices in order, the split as
    layer counts); layers and memory are per device name, the host included.
    """

    role: str
    model: str
    n_gpu_layers: int
    n_layers: int  # n_layer + 1 (the output layer)
    devices: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] | None = None
    layers: dict[str, int] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    auto: bool = True

    def summary(self) -> str:
        """'CUDA0 29/29 layers' or 'CUDA0 20 + CPU 9 of 29 layers' or 'CPU 29/29 layers'."""
        parts = [f"{d} {n}" for d, n in self.layers.items() if n]
        if not parts:  # an explicit -ngl for a model the planner could not size
            return f"{self.n_gpu_layers} layers asked for {', '.join(self.devices) or 'the GPU'} (unplanned)"
        if len(parts) == 1:
            return f"{parts[0]}/{self.n_layers} layers"
        return " + ".join(parts) + f" of {self.n_layers} layers"

    @property
    def key(self) -> str:
        """Device:layers pairs, stable, for cost-cache keys ('CUDA0:29,CPU:0')."""
        return ",".join(f"{d}:{n}" for d, n in self.layers.items()) or f"ngl{self.n_gpu_layers}"


def assign_layers(n_layer: int, n_gpu_layers: int, splits: Sequence[float]) -> list[int | None]:
    """Device index (into the offload list) of each layer 0..n_layer, None = CPU.

    The rule of llama.cpp's load_tensors, float32 arithmetic included: the last
    n_gpu_layers layers go to the devices, device i taking the share up to its cumulative
    split (upper_bound of the layer's position among the offloaded ones).
    """
    if not splits or n_gpu_layers <= 0:
        return [None] * (n_layer + 1)
    s = np.asarray(splits, dtype=np.float32)
    if float(s.sum()) <= 0:
        s = np.ones(len(s), dtype=np.float32)
    cum = np.cumsum(s, dtype=np.float32)
    cum = list(cum / np.float32(cum[-1]))
    start = max(n_layer + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer + 1)
    out: list[int | None] = []
    for il in range(n_layer + 1):
        if il < start or il - start >= act:
            out.append(None)
        else:
            x = np.float32(il - start) / np.float32(act)
            out.append(min(bisect.bisect_right(cum, x), len(cum) - 1))
    return out


def usage(layout: Layout, need: Need, assignment: Sequence[int | None], offload: Sequence[str],
          host: str) -> dict[str, int]:
    """Bytes each device (and the host) needs for an assignment from assign_layers."""
    n = layout.n_layer
    mem = {name: 0 for name in offload}
    mem[host] = layout.input_bytes + 4 * need.n_batch * layout.n_vocab  # + the logits kept on the host
    runs: dict[str, bool] = {}  # device -> holds the output layer
    kv = kv_bytes(layout, need)
    for il, d in enumerate(assignment):
        dev = host if d is None else offload[d]
        mem[dev] += layout.layer_weight(il)
        if il < n:
            mem[dev if need.kv_offload else host] += kv
        runs[dev] = runs.get(dev, False) or il == n
    for dev, has_out in runs.items():
        mem[dev] += compute_bytes(layout, need, output=has_out)
    return mem


def default_offload(devices: Sequence[Device]) -> list[Device]:
    """llama.cpp's default device list: RPC servers first, then GPUs; iGPUs only without GPUs."""
    rpc = [d for d in devices if d.kind == "gpu" and d.backend == "RPC"]
    gpus = [d for d in devices if d.kind == "gpu" and d.backend != "RPC"]
    igpus = [d for d in devices if d.kind == "igpu"]
    return rpc + gpus + (igpus if not gpus else [])


def resolve_offload(devices: Sequence[Device], req: Request) -> list[Device]:
    """The devices a request offloads to: -dev names (checked) or llama.cpp's default list."""
    if req.devices is not None:
        by_name = {d.name: d for d in devices}
        flag = "-devd/--device-draft" if req.role == "draft" else "-dev/--device"
        for n in req.devices:
            if n != "none" and (n not in by_name or by_name[n].kind not in ("gpu", "igpu")):
                listing = ", ".join(f"{d.name} ({d.description or d.kind})" for d in devices)
                why = "is not an offload device (for CPU only: -ngl 0 or -dev none)" if n in by_name \
                    else "is not a device of this llama.cpp build"
                raise PlacementError(f"{flag} {n} {why}; devices: {listing}, or none")
        chosen = [by_name[n] for n in req.devices if n != "none"]
    else:
        chosen = default_offload(devices)
        if req.role == "draft":
            # the draft stays on this machine unless -devd names a remote device: every
            # drafted token over the network would pay a round trip, which is what
            # speculation is there to hide
            chosen = [d for d in chosen if d.backend != "RPC"]
    if req.split_mode == "none" and chosen:
        if not 0 <= req.main_gpu < len(chosen):
            raise PlacementError(f"-mg/--main-gpu {req.main_gpu} is out of range: {len(chosen)} "
                                 f"device(s) ({', '.join(d.name for d in chosen)})")
        chosen = [chosen[req.main_gpu]]
    return chosen


def _greedy_counts(layout: Layout, need: Need, ngl: int, offload: Sequence[Device],
                   left: dict[str, int]) -> list[int] | None:
    """Layers per device filling the devices in order, or None when ngl layers do not fit."""
    n = layout.n_layer
    il = max(n + 1 - ngl, 0)
    kv = kv_bytes(layout, need) if need.kv_offload else 0
    counts = []
    for dev in offload:
        used, count = 0, 0
        while il <= n:
            cost = layout.layer_weight(il) + (kv if il < n else 0)
            if used + cost + compute_bytes(layout, need, output=il == n) > left[dev.name]:
                break
            used += cost
            count += 1
            il += 1
        counts.append(count)
    return counts if il > n else None


def _fits(mem: dict[str, int], offload: Sequence[Device], left: dict[str, int], host: str,
          host_left: int) -> bool:
    host_need = mem[host] + sum(mem.get(d.name, 0) for d in offload if d.unified)
    return host_need <= host_left and all(mem.get(d.name, 0) <= left[d.name] for d in offload)


def _build(layout: Layout, need: Need, req: Request, ngl: int, offload: Sequence[Device],
           splits: Sequence[float], host: str, auto: bool) -> Placement:
    names = [d.name for d in offload]
    assignment = assign_layers(layout.n_layer, ngl, splits)
    mem = usage(layout, need, assignment, names, host)
    per = {name: 0 for name in names} | {host: 0}
    for d in assignment:
        per[host if d is None else names[d]] += 1
    used = [i for i, name in enumerate(names) if per[name]] if ngl > 0 else []
    return Placement(
        role=req.role, model=layout.name, n_gpu_layers=ngl, n_layers=layout.n_layer + 1,
        devices=tuple(names[i] for i in used),
        tensor_split=tuple(float(splits[i]) for i in used) if len(used) > 1 or req.tensor_split else None,
        layers={name: per[name] for name in [*(names[i] for i in used), host]},
        memory={name: mem[name] for name in [*(names[i] for i in used), host]},
        auto=auto,
    )


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def _too_big(layout: Layout, req: Request, p: Placement, left: dict[str, int], host: str,
             host_left: int, offload: Sequence[Device]) -> PlacementError:
    over = [f"{d}: needs {_gib(b)}, {_gib(max(left[d], 0))} free after the 1 GiB margin"
            for d, b in p.memory.items() if d != host and b > left[d]]
    host_need = p.memory[host] + sum(p.memory.get(d.name, 0) for d in offload if d.unified)
    if host_need > host_left:
        over.append(f"host RAM: needs {_gib(host_need)}, {_gib(max(host_left, 0))} left")
        fix = "use a smaller --ctx or a smaller quantization of the model"
    else:  # an explicit -ngl that the devices cannot hold
        fix = f"lower {req.flag} (now {req.gpu_layers}), use a smaller --ctx, or -nkvo (KV cache in host RAM)"
        if req.role == "target":
            fix += ", or fewer draft layers on the GPU (-ngld)"
    return PlacementError(f"{req.role} {layout.name} does not fit ({'; '.join(over)}): {fix}")


def plan(devices: Sequence[Device], entries: Sequence[tuple[Layout, Need, Request]],
         margin: int = MARGIN) -> list[Placement]:
    """Placements for the entries (returned in their order).

    Explicit -ngl requests are placed first (obeyed as given, or PlacementError naming
    the flag), then `auto` drafts, then `auto` targets, each taking the most layers that
    fit in what the previous ones left. With no offload device an auto model is CPU-only.
    """
    host_dev = next((d for d in devices if d.kind == "cpu"), None)
    host = host_dev.name if host_dev else "CPU"
    host_left = (host_dev.total - margin) if host_dev else 1 << 62
    left = {d.name: d.free - margin for d in devices if d.kind != "cpu"}
    order = sorted(range(len(entries)),
                   key=lambda i: (entries[i][2].gpu_layers == AUTO, entries[i][2].role != "draft"))
    out: list[Placement | None] = [None] * len(entries)
    for i in order:
        layout, need, req = entries[i]
        offload = resolve_offload(devices, req)
        p = _place(layout, need, req, offload, left, host, host_left)
        for d in offload:
            if d.name in p.memory:
                left[d.name] -= p.memory[d.name]
        host_left -= p.memory[host] + sum(p.memory.get(d.name, 0) for d in offload if d.unified)
        out[i] = p
    return [p for p in out if p is not None]


def _place(layout: Layout, need: Need, req: Request, offload: Sequence[Device], left: dict[str, int],
           host: str, host_left: int) -> Placement:
    n_all = layout.n_layer + 1
    if req.tensor_split is not None and len(req.tensor_split) > max(len(offload), 1):
        raise PlacementError(f"-ts/--tensor-split has {len(req.tensor_split)} values but the {req.role} "
                             f"has {len(offload)} offload device(s)")
    fixed = list(req.tensor_split or ())[: len(offload)]
    fixed += [0.0] * (len(offload) - len(fixed))
    if req.gpu_layers != AUTO:
        ngl = n_all if req.gpu_layers == ALL else min(int(req.gpu_layers), n_all)
        if ngl > 0 and not offload:
            raise PlacementError(f"{req.flag} {req.gpu_layers}: no device to offload the {req.role} to")
        counts = _greedy_counts(layout, need, ngl, offload, left) if not req.tensor_split else None
        splits = fixed if req.tensor_split else (counts or [d.free for d in offload])
        p = _build(layout, need, req, ngl, offload, splits, host, auto=False)
        if not _fits(p.memory, offload, left, host, host_left):
            raise _too_big(layout, req, p, left, host, host_left, offload)
        return p
    for ngl in range(n_all if offload else 0, -1, -1):
        if ngl > 0 and req.tensor_split:
            splits: Sequence[float] = fixed
        elif ngl > 0:
            counts = _greedy_counts(layout, need, ngl, offload, left)
            if counts is None:
                continue
            splits = counts
        else:
            splits = []
        p = _build(layout, need, req, ngl, offload, splits, host, auto=True)
        if _fits(p.memory, offload, left, host, host_left):
            return p
    raise _too_big(layout, req, p, left, host, host_left, offload)
