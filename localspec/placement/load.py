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
    flash_attn: str = "auto"
    extra: dict = field(default_factory=dict)
