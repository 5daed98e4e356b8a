"""The only code that touches llama_cpp / ctypes (see docs/design.md#rooms)."""

from localspec.backend.batch import Batch
from localspec.backend.context import Context
from localspec.backend.model import Detokenizer, Model, check_vocab_compat

__all__ = ["Batch", "Context", "Detokenizer", "Model", "check_vocab_compat"]
