#!/usr/bin/env python3
"""Write a random-weight GGUF of a real model's shape (Qwen2.5 0.5B / 1.5B / 7B), no download.

The command line of tests/support/tiny_gguf/shapes.py (why and how: its docstring): Q4_0
weights with random nibbles, a synthetic vocabulary shared by every shape, streamed to the
file one tensor at a time. The GPU check (scripts/gpu_check.sh) writes its models with it.

    python3 scripts/gpu_check_gguf.py OUT.gguf --shape qwen2.5-1.5b [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a plain checkout or the bundle

from tests.support.tiny_gguf import SHAPES, write_shape  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    write_shape(a.out, a.shape, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
