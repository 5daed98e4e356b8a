#!/usr/bin/env python3
"""Write the tiny random-weight GGUFs of each memory kind that the tests use, into a folder.

usage: scripts/write_tiny_models.py [DIR]   (default: bench/results/tmp/tiny)

For `localspec bench memory` and for trying a memory kind by hand, e.g.
    localspec run -m DIR/qwen35.gguf -md DIR/qwen35-draft.gguf -p "hi" -n 32 --temp 0 --explain
Files: ARCH.gguf (seed 0) and ARCH-draft.gguf (the same weights + noise: a near-copy draft
that agrees part of the time) for qwen35 (hybrid), mamba2 (recurrent), gemma3 (sliding
window), qwen3moe (MoE), qwen35-mtp.gguf (one nextn layer): the set tests/conftest.py's
`tiny` fixture writes (tests/support/tiny_gguf). Needs the Qwen2.5 0.5B GGUF for its
vocabulary (fetched into the localspec cache when missing) and the `gguf` package.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a plain checkout

from localspec.models import resolve_model  # noqa: E402
from tests.support.tiny_gguf import read_qwen25_tokenizer, write_memory_kinds  # noqa: E402


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    d = Path(argv[0] if argv else "bench/results/tmp/tiny")
    write_memory_kinds(d, read_qwen25_tokenizer(resolve_model("qwen2.5-coder-0.5b")))
    print(f"wrote tiny models into {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
