"""ggml's backend registry through ctypes: which backends are built in, which devices exist.

Why not `llama_supports_gpu_offload()`: with RPC compiled in it is true on a machine with
no GPU at all (the RPC backend counts), so offload is decided from the devices actually
present. The ggml_backend_dev_* / ggml_backend_reg_* functions are exported by the
package's libggml (llama-cpp-python does not bind them); the signatures are those of
ggml/include/ggml-backend.h in the llama.cpp vendored by llama-cpp-python 0.3.36.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

import llama_cpp

from localspec.backend import ggml
from localspec.placement.plan import Device

# enum ggml_backend_dev_type
DEV_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
# backends whose devices compute on the host (or elsewhere): not a GPU backend of this build
HOST_BACKENDS = {"CPU", "BLAS", "RPC", "AMX", "ZenDNN", "KleidiAI", "OpenVINO-CPU"}
VERSION = "0.3.36"


def _lib() -> ctypes.CDLL:
    """libggml, typed (backend/ggml.py)."""
    return ggml.lib()


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", errors="replace") if raw else ""


def backends() -> list[str]:
    """Names of the backends compiled into (or loaded by) this llama.cpp: CPU, RPC, CUDA..."""
    lib = _lib()
    return [_text(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)))
            for i in range(lib.ggml_backend_reg_count())]


def gpu_backends() -> list[str]:
    """The backends that drive a GPU (Metal, CUDA, Vulkan, HIP, SYCL...), present or not."""
    return [b for b in backends() if b not in HOST_BACKENDS]


def devices() -> list[Device]:
    """Every device ggml knows now (RPC servers appear once registered), with free memory."""
    lib = _lib()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = DEV_TYPES.get(lib.ggml_backend_dev_type(dev), "gpu")
        backend = _text(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev)))
        if kind == "cpu" and backend != "CPU":
            # a GPU API on a software device (Vulkan on Mesa's lavapipe reports type CPU): an
            # offload device computing in host RAM, not the host itself
            kind = "igpu"
        out.append(Device(
            name=_text(lib.ggml_backend_dev_name(dev)), kind=kind, free=free.value,
            total=total.value, backend=backend, description=_text(lib.ggml_backend_dev_description(dev)),
            # Metal's memory is the Mac's RAM; integrated GPUs share the host's too
            unified=kind == "igpu" or backend == "MTL",
        ))
    return out


@functools.cache
def amx_kernels() -> bool:
    """Whether this llama.cpp was compiled with ggml's AMX kernels (built with -march=native on
    an AMX CPU: Sapphire Rapids and later). Their matmul segfaults on the first decode of a
    quantized model on some such machines (upstream llama.cpp issue 20824; seen on this
    project's 2-core VMs), so `auto` repacking leaves them unused (repack_on)."""
    return b"AMX_INT8 = 1" in (llama_cpp.llama_print_system_info() or b"")


def repack_on(asked: bool | None) -> bool:
    """llama_model_params.use_extra_bufts for --repack / --no-repack / auto (None)."""
    return (not amx_kernels()) if asked is None else asked


def device_handle(name: str) -> int:
    """The ggml_backend_dev_t of a device name (0 when there is none)."""
    return int(_lib().ggml_backend_dev_by_name(name.encode()) or 0)


def reinstall_hint() -> str:
    """The command that gets a GPU build of llama-cpp-python on this platform."""
    pin = f"llama-cpp-python=={VERSION}"
    if sys.platform == "darwin":
        if platform.machine() != "arm64":
            return (f"Metal needs an Apple-silicon Mac and an arm64 Python; there: pip install "
                    f"--force-reinstall --no-cache-dir {pin} (Metal is built by default on macOS)")
        return (f"Metal is built by default on macOS: pip install --force-reinstall --no-cache-dir {pin} "
                f"(if this build lacks it, CMAKE_ARGS=\"-DGGML_METAL=on\")")
    env = '$env:CMAKE_ARGS="-DGGML_CUDA=on"; ' if sys.platform == "win32" else 'CMAKE_ARGS="-DGGML_CUDA=on" '
    return (f"{env}pip install --force-reinstall --no-cache-dir {pin} (NVIDIA, needs the CUDA toolkit; "
            "-DGGML_VULKAN=on for Vulkan, -DGGML_HIP=on for AMD ROCm)")
