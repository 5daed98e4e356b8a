"""ggml's C API beyond the Python bindings: one typed handle for every module that needs it.

llama-cpp-python binds llama.h but not ggml-backend.h; the device registry (devices.py) and
the RPC backend (rpc.py, rpc_server.py) call those functions through the package's own
libggml. The signatures are those of ggml/include/ggml-backend.h in the llama.cpp vendored
by llama-cpp-python 0.3.36, declared here once.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

_vp, _cp, _sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
SIGNATURES = (
    ("ggml_backend_reg_count", [], _sz),
    ("ggml_backend_reg_get", [_sz], _vp),
    ("ggml_backend_reg_name", [_vp], _cp),
    ("ggml_backend_reg_by_name", [_cp], _vp),
    ("ggml_backend_reg_get_proc_address", [_vp, _cp], _vp),
    ("ggml_backend_register", [_vp], None),
    ("ggml_backend_reg_dev_count", [_vp], _sz),
    ("ggml_backend_reg_dev_get", [_vp, _sz], _vp),
    ("ggml_backend_dev_count", [], _sz),
    ("ggml_backend_dev_get", [_sz], _vp),
    ("ggml_backend_dev_by_name", [_cp], _vp),
    ("ggml_backend_dev_name", [_vp], _cp),
    ("ggml_backend_dev_description", [_vp], _cp),
    ("ggml_backend_dev_type", [_vp], ctypes.c_int),
    ("ggml_backend_dev_memory", [_vp, ctypes.POINTER(_sz), ctypes.POINTER(_sz)], None),
    ("ggml_backend_dev_backend_reg", [_vp], _vp),
    ("ggml_backend_load_all", [], None),
)


@lru_cache(maxsize=1)
def lib() -> ctypes.CDLL:
    """The package's libggml (the one libllama is linked against: one registry), typed."""
    from llama_cpp._ggml import libggml

    from localspec.backend import logs

    logs.install()  # before the registry starts: its backends log while they probe
    for name, args, res in SIGNATURES:
        fn = getattr(libggml, name)
        fn.argtypes, fn.restype = args, res
    if libggml.ggml_backend_reg_count() == 0:  # a GGML_BACKEND_DL build: backends are plugins
        libggml.ggml_backend_load_all()
    return libggml
