"""Progress bars for every long step (download, assembly, hashing, quantize).

One helper so all bars look alike, go to stderr (stdout stays clean for `models path`),
and vanish entirely with progress=False (tests, --quiet, JSON output).
"""

from __future__ import annotations

import hashlib
import sys
from typing import IO

from tqdm import tqdm


def bar(total: int | None, desc: str, enabled: bool = True, unit: str = "B") -> tqdm:
    """A byte-scaled tqdm bar on stderr; off when disabled or stderr is not a terminal."""
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B",
                unit_divisor=1024 if unit == "B" else 1000, disable=None if enabled else True,
                file=sys.stderr, dynamic_ncols=True, leave=False, mininterval=0.5)


def note(message: str, enabled: bool = True) -> None:
    """A one-line status message on stderr (shown when progress is shown)."""
    if enabled:
        tqdm.write(message, file=sys.stderr)


class HashingWriter:
    """Write-through file wrapper that hashes and counts bytes as they are written.

    Assembling a model from parts hashes it on the way in, so a 1 GB file is not read a
    second time just to compute its sha256.
    """

    def __init__(self, fh: IO[bytes], pbar: tqdm | None = None) -> None:
        self.fh = fh
        self.pbar = pbar
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.fh.write(data)
        self.sha.update(data)
        self.size += len(data)
        if self.pbar is not None:
            self.pbar.update(len(data))
        return len(data)

    def copy_from(self, src: IO[bytes], chunk: int = 4 << 20) -> int:
        n = 0
        while data := src.read(chunk):
            n += self.write(data)
        return n

    def hexdigest(self) -> str:
        return self.sha.hexdigest()
