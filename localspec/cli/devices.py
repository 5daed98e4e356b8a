"""`localspec devices [-m T -md D]`: what this llama.cpp build can run on, and where `auto` puts
a pair.

Why a command of its own: whether a model runs on the GPU depends on how llama-cpp-python
was built (a stock Linux install is CPU-only), and "why is it slow" is usually answered by
"no GPU backend" or "the target only half fits". This lists the compiled-in backends and
each device with its free/total memory and, given models, the placement `auto` (or the
-ngl/-dev flags given) would choose and the memory it needs per device.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from localspec.flags.args import add_model_args, session_options
from localspec.placement.plan import GiB

DESCRIPTION = """\
List the llama.cpp backends compiled into this install and the devices they found (type,
free and total memory). With -m (and -md), also show the placement the same flags would
give `localspec run`: layers per device and the memory each device needs (weights + KV
cache for --ctx + compute buffers; 1 GiB of every GPU is kept free)."""


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def cmd_devices(a: argparse.Namespace) -> int:
    from localspec import tools as devs
    from localspec.models import resolve_model

    if getattr(a, "rpc", None):  # RPC servers' devices only exist once registered
        devs.connect_rpc(a.rpc)
    present = devs.devices()
    print(f"llama.cpp backends in this build: {', '.join(devs.backends()) or 'none'}")
    print(f"{'device':10} {'type':5} {'backend':8} {'free':>10} {'total':>10}  description")
    for d in present:
        print(f"{d.name:10} {d.kind:5} {d.backend:8} {_gib(d.free):>10} {_gib(d.total):>10}  "
              f"{d.description}{' (unified memory)' if d.unified else ''}")
    if devs.amx_kernels():
        print("this llama.cpp has ggml's AMX kernels, which segfault on the first quantized decode on "
              "some machines: weight repacking is off unless --repack (rebuild without them: "
              "docs/gpu.md#repack)")
    gpus = [d for d in present if d.kind in ("gpu", "igpu")]
    if not devs.gpu_backends():
        print("no GPU backend is compiled into this llama.cpp build: models run on the CPU. "
              f"For GPU offload reinstall llama-cpp-python with one: {devs.reinstall_hint()}")
    elif not gpus:
        print(f"the {', '.join(devs.gpu_backends())} backend found no device: models run on the CPU "
              "(check the driver, or CUDA_VISIBLE_DEVICES / GGML_VK_VISIBLE_DEVICES)")
    if a.target is None:
        if a.draft is not None:
            print("give -m TARGET with -md to see the placement")
        return 0
    opts = session_options(a)
    models = [("target", Path(resolve_model(a.target, fetch=False)), opts.target_load)]
    if a.draft:
        models.append(("draft", Path(resolve_model(a.draft, fetch=False)), opts.draft_load))
    print(f"placement (ctx {opts.n_ctx}, batch {opts.n_batch}; -ngl {opts.target_load.gpu_layers}, "
          f"-ngld {opts.draft_load.gpu_layers}):")
    for p in devs.plan_models(opts, models, present, estimate=True):
        print(f"  {p.role} {p.model}: {p.summary()}"
              + (f", tensor split {','.join(f'{x:g}' for x in p.tensor_split)}" if p.tensor_split else ""))
        for dev, need in p.memory.items():
            print(f"    {dev}: {_gib(need)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `devices` to the main parser's subparsers."""
    p = subparsers.add_parser("devices", help="backends, devices and free memory; the placement of -m/-md",
                              description=DESCRIPTION)
    add_model_args(p, default_pair=False)
    p.set_defaults(func=cmd_devices)
    return p
