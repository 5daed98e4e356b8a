#!/usr/bin/env python3
"""Fetch registry models into the localspec cache: same code as `localspec models fetch`.

usage: scripts/download_models.py [NAME ...] [--force] [--quiet]
       (no NAME: the default pair; `--all-local`: every model that needs no hub access)
Useful in CI to warm the cache before the tests, and on machines without the CLI installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a plain checkout

from localspec.cli.models import run  # noqa: E402
from localspec.models import default_pair, registry  # noqa: E402


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(__doc__.strip())
        return 0
    flags = [a for a in argv if a.startswith("-") and a != "--all-local"]
    names = [a for a in argv if not a.startswith("-")]
    if "--all-local" in argv:
        names += [n for n, s in registry().models.items()
                  if any(src.kind in ("pypi", "file", "derive") for src in s.sources)]
    if not names:
        names = list(default_pair())
    return run(["models", "fetch", *dict.fromkeys(names), *flags])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
