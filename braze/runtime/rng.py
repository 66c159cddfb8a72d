"""The global random state behind `rand`/`randn` ops that were given no seed."""

from __future__ import annotations

import threading

from braze.ops.philox import check_seed_offset

_lock = threading.Lock()
_state = {"seed": 0x5EED, "offset": 0}


def manual_seed(seed: int) -> None:
    """Makes later unseeded `rand`/`randn` reproducible: the stream restarts at (seed, offset 0)."""
    check_seed_offset(seed, 0)
    with _lock:
        _state["seed"], _state["offset"] = seed, 0


def next_seed_offset() -> tuple[int, int]:
    """The (seed, offset) for one random op of one execution; each call gets a fresh counter space."""
    with _lock:
        offset = _state["offset"]
        _state["offset"] = (offset + 1) % 2**64
        return _state["seed"], offset
