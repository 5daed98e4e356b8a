"""How one model is loaded: threads and where its layers go (target and draft apart).

A plain dataclass with no llama.cpp import, so the CLI, the session interface and the
placement planner can all speak about a load without touching the backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LoadOptions:
    """Per-model load settings, named after llama.cpp's flags (`-ngl`, `-dev`, `-sm`, ...).

    gpu_layers: "auto" (fit to free device memory; CPU when no GPU backend is built in),
    "all", or a layer count (0 = CPU only). devices: device names (`CUDA0`, `Vulkan0`,
    `RPC0`; None = llama.cpp's default). flash_attn: "auto" | "on" | "off".
    """

    threads: int | None = None
    gpu_layers: int | str = "auto"
    devices: list[str] | None = None
    split_mode: str = "layer"
    tensor_split: list[float] | None = None
    main_gpu: int = 0
    kv_offload: bool = True
    # llama.cpp's op offload: with a GPU backend loaded, a big batch (>= 32 tokens) of layers
    # kept in host memory is computed on the GPU, the weights copied over for it. A win on a
    # dGPU's bus; on a software device (Mesa's lavapipe) a 32-token CPU decode took 17-21 s
    # instead of 0.14. --no-op-offload keeps host layers on the CPU.
    op_offload: bool = True
    # llama.cpp's weight repacking (its "extra buffer types": Q4_0/Q4_K rows interleaved for
    # the CPU's SIMD, or AMX tiles). None = auto: on, except in a llama.cpp built with AMX
    # kernels, whose AMX matmul segfaults on the first quantized decode on some machines
    # (backend/devices.amx_kernels). --repack / -nr --no-repack (llama.cpp's flags) decide.
    repack: bool | None = None
    flash_attn: str = "auto"
    extra: dict = field(default_factory=dict)
