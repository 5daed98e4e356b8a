"""GPU-offload flags with llama.cpp's names -> LoadOptions for the target and the draft.

Same spelling as llama-server / llama-speculative, so a command line carries over:
-ngl/-ngld, -dev/-devd, -sm, -ts, -mg, -nkvo, --no-op-offload, --repack/-nr, -fa, -td. Target
and draft get their own LoadOptions; the split, main-GPU, flash-attention, KV- and op-offload
and repack flags apply to both, and the draft uses the target's -dev list unless -devd says
otherwise (a device kept out of the target's list is usually busy or slow for the draft too).
"""

from __future__ import annotations

import argparse
import re

from localspec.errors import ConfigError
from localspec.placement.load import LoadOptions

EPILOG = "GPU layers: N (count, 0 = CPU only), auto (fit to free memory; CPU without a GPU), all"


def gpu_layers(text: str) -> int | str:
    """argparse type of -ngl/-ngld: a count >= 0, 'auto' or 'all' (-1 means all, as in llama.cpp)."""
    t = text.strip().lower()
    if t in ("auto", "all"):
        return t
    try:
        n = int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use a layer count, auto or all") from None
    if n < -1:
        raise argparse.ArgumentTypeError(f"{text!r}: use a layer count >= 0, auto or all")
    return "all" if n == -1 else n


def device_list(text: str) -> list[str]:
    """NAME[,NAME...] (llama.cpp's -dev syntax); 'none' = no offload device."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give device names, e.g. CUDA0,CUDA1 (see `localspec devices`)")
    return ["none"] if "none" in names else names


def tensor_split(text: str) -> list[float]:
    """Proportions per device, 'A,B' or 'A/B' as in llama.cpp (e.g. 3,1)."""
    try:
        vals = [float(v) for v in re.split(r"[,/]", text) if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use proportions like 3,1") from None
    if not vals or any(v < 0 for v in vals) or sum(vals) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: use non-negative proportions, not all 0")
    return vals


def add_offload_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("GPU offload (llama.cpp's flags)", EPILOG)
    g.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", dest="gpu_layers", type=gpu_layers,
                   default="auto", metavar="N|auto|all",
                   help="target layers on the GPU (default auto: fit target, draft and KV into free memory)")
    g.add_argument("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", dest="gpu_layers_draft",
                   type=gpu_layers, default="auto", metavar="N|auto|all",
                   help="draft layers on the GPU (default auto: the draft goes fully on the GPU first)")
    g.add_argument("-dev", "--device", dest="device", type=device_list, default=None, metavar="NAME[,NAME]",
                   help="devices for the target (see `localspec devices`; none = CPU only)")
    g.add_argument("-devd", "--device-draft", dest="device_draft", type=device_list, default=None,
                   metavar="NAME[,NAME]", help="devices for the draft (default: the -dev list)")
    g.add_argument("-sm", "--split-mode", dest="split_mode", choices=["none", "layer", "row"],
                   default="layer", help="split over several GPUs by layer (default), by row, or none")
    g.add_argument("-ts", "--tensor-split", dest="tensor_split", type=tensor_split, default=None,
                   metavar="A,B", help="share of the offloaded layers per device, e.g. 3,1")
    g.add_argument("-mg", "--main-gpu", dest="main_gpu", type=int, default=0,
                   help="the GPU used with -sm none (index into the device list)")
    g.add_argument("-nkvo", "--no-kv-offload", dest="no_kv_offload", action="store_true",
                   help="keep the KV caches in host memory")
    g.add_argument("--no-op-offload", dest="no_op_offload", action="store_true",
                   help="compute layers kept in host memory on the CPU even for big batches (llama.cpp "
                        "otherwise copies their weights to the GPU for a prompt of 32+ tokens: right "
                        "on a dGPU, slow on a software or a weak integrated one)")
    rp = g.add_mutually_exclusive_group()
    rp.add_argument("--repack", dest="repack", action="store_true", default=None,
                    help="repack quantized weights for the CPU's SIMD (default: on, as in llama.cpp, "
                         "unless this llama.cpp was built with AMX kernels, whose AMX matmul crashes on "
                         "some machines: docs/gpu.md#repack)")
    rp.add_argument("-nr", "--no-repack", dest="repack", action="store_false",
                    help="keep quantized weights as stored (slower Q4 decodes on x86; a way around a "
                         "crash in a repacked or AMX kernel)")
    g.add_argument("-fa", "--flash-attn", dest="flash_attn", choices=["auto", "on", "off"],
                   default="auto", help="flash attention (default auto: where the device supports it)")
    g.add_argument("-td", "--threads-draft", dest="threads_draft", type=int, default=None,
                   help="CPU threads of the draft (default: --threads)")


def load_options(a: argparse.Namespace) -> tuple[LoadOptions, LoadOptions]:
    """(target, draft) LoadOptions from parsed flags (the defaults when the flags are absent)."""
    if (getattr(a, "threads_draft", None) or 0) < 0:
        raise ConfigError(f"-td/--threads-draft must be >= 0, 0 = the default (got {a.threads_draft})")
    if getattr(a, "main_gpu", 0) < 0:
        raise ConfigError(f"-mg/--main-gpu must be a device index >= 0 (got {a.main_gpu})")
    shared = dict(
        split_mode=getattr(a, "split_mode", "layer"),
        tensor_split=getattr(a, "tensor_split", None),
        main_gpu=getattr(a, "main_gpu", 0),
        kv_offload=not getattr(a, "no_kv_offload", False),
        op_offload=not getattr(a, "no_op_offload", False),
        repack=getattr(a, "repack", None),
        flash_attn=getattr(a, "flash_attn", "auto"),
    )
    threads = getattr(a, "threads", None)
    devices = getattr(a, "device", None)
    target = LoadOptions(threads=threads, gpu_layers=getattr(a, "gpu_layers", "auto"), devices=devices, **shared)
    draft_devices = getattr(a, "device_draft", None)
    draft = LoadOptions(
        threads=getattr(a, "threads_draft", None) or threads,
        gpu_layers=getattr(a, "gpu_layers_draft", "auto"),
        devices=draft_devices if draft_devices is not None else devices,
        **shared,
    )
    return target, draft
