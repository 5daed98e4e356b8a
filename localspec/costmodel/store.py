"""The cost model's cache files, and what happens when they cannot be written.

Curves and acceptance estimates live in `$LOCALSPEC_HOME/costs/` as small JSON files,
each written whole (a temporary file, then a rename: readers never see half of one, and
the slots of `serve -np N` write at once). A cache directory that cannot be written (a
shared or packaged LOCALSPEC_HOME: the models are there, the directory is read-only, or a
full disk) must not break a turn: an answer already printed was followed by an OSError
traceback and exit 1 in `run`, and every `auto` request of `serve` failed (issue 43). So a
file that cannot be written is kept in memory for the life of the process instead (read
back before the disk's older copy, by every session and slot of the process), and the
user is told once, as a warning on the `localspec.costmodel` logger (`run` shows it on
stderr, `serve` beside its other log lines): the timings are measured again by the next
process, which is what a cache that cannot keep them costs.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import threading
from pathlib import Path

log = logging.getLogger("localspec.costmodel")

_lock = threading.Lock()
_unsaved: dict[Path, dict] = {}  # path -> the content that could not be written there
_warned: list[str] = []  # the one warning said (at most one per process)


def write_json(path: Path, data: dict) -> bool:
    """Write `data` to `path` whole; True when it reached the disk. When it cannot (an
    OSError: read-only, not a directory, no space), it is kept in memory for `read_json`
    and a warning is said once per process."""
    tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")  # one per writer
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        with _lock:
            _unsaved[path] = copy.deepcopy(data)
            first = not _warned
            if first:
                _warned.append(str(path.parent))
        if first:
            log.warning("cost model: cannot write its cache in %s (%s); its timings are "
                        "kept in memory for this process only (set LOCALSPEC_HOME to a writable "
                        "directory to keep them)", path.parent, e.strerror or e)
        return False
    with _lock:
        _unsaved.pop(path, None)  # the disk is current again
    return True


def read_json(path: Path) -> dict | None:
    """What `write_json` last gave `path` in this process when the disk refused it, else
    the file's content; None when neither is there or the file is not JSON."""
    with _lock:
        kept = _unsaved.get(path)
        if kept is not None:
            return copy.deepcopy(kept)
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def forget() -> None:
    """Drop what is kept in memory and the warning's once-only mark (`costs clear`, tests)."""
    with _lock:
        _unsaved.clear()
        _warned.clear()
