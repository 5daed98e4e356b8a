"""Model registry (models.toml), fetching into a local cache, and GGUF file checks.

Public surface used by the CLI, the bench and the tests; see docs/models.md for the user
view. Nothing here imports llama_cpp (derived models call backend.quantize lazily).
"""

from localspec.models.cache import home_dir, models_dir
from localspec.models.gguf import GGUFInfo, check_gguf
from localspec.models.registry import (
    ModelSpec,
    Pair,
    Registry,
    Source,
    default_pair,
    default_registry_path,
    registry,
)
from localspec.models.resolve import (
    CacheState,
    cache_state,
    fetch,
    model_path,
    resolve_model,
    verify,
)

__all__ = [
    "CacheState",
    "GGUFInfo",
    "ModelSpec",
    "Pair",
    "Registry",
    "Source",
    "cache_state",
    "check_gguf",
    "default_pair",
    "default_registry_path",
    "fetch",
    "home_dir",
    "model_path",
    "models_dir",
    "registry",
    "resolve_model",
    "verify",
]
