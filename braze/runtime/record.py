"""`bz.record()`: what braze did on this thread while recording, for tests and curious users.

Recording costs one thread-local lookup per event when no recorder is active.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

_local = threading.local()


@dataclass
class Launch:
    """One task run: the kernel's task name and its index range."""

    kernel: str
    task: str
    begin: int
    end: int
    chunks: int = 1  # how many threads shared the range (CPU)


@dataclass
class Recording:
    launches: list[Launch] = field(default_factory=list)
    compiles: list[str] = field(default_factory=list)  # kernels compiled (not found in any cache)
    segments: list[list[str]] = field(default_factory=list)  # per fusion compiled: the tensors its tasks write


@contextmanager
def record() -> Iterator[Recording]:
    """Records launches, compilations and segmentations on this thread for the `with` body."""
    recording = Recording()
    stack = _local.__dict__.setdefault("stack", [])
    stack.append(recording)
    try:
        yield recording
    finally:
        stack.pop()


def _active() -> list[Recording]:
    return getattr(_local, "stack", ())


def note_launch(launch: Launch) -> None:
    for recording in _active():
        recording.launches.append(launch)


def recording() -> bool:
    return bool(getattr(_local, "stack", None))


def note_compile(kernel: str) -> None:
    for recording in _active():
        recording.compiles.append(kernel)


def note_segments(writes: list[str]) -> None:
    for recording in _active():
        recording.segments.append(writes)
